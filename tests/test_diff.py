"""Differential attention: ops against a loop-over-positions reference, the layer against an
independent re-computation from its weights (head pairing, value layout, lambda, RMSNorm), and
the attention kind inside a tiny Transformer (causality, RoPE on both halves, odd head counts).
"""
from __future__ import annotations

import functools
import math

import pytest
import torch

from lengen.attention.diff import DifferentialAttention, default_lambda_init
from lengen.model.config import ModelConfig
from lengen.model.transformer import Transformer
from lengen.ops.diff import diff_attention_chunked, diff_attention_naive
from lengen.posenc import build_posenc

F64 = dict(atol=1e-10, rtol=1e-8)
B, H, D = 2, 2, 3              # H differential heads = 2H ordinary heads of width D
NAMES = ("q", "k", "v", "lam", "bias")


def diff_reference(q, k, v, lam, bias=None, causal=True, scale=None):
    """out[h, i] = sum_j (softmax_j(q_{2h,i}.k_{2h,j}) - lam_h softmax_j(q_{2h+1,i}.k_{2h+1,j})) v_{h,j}."""
    _, _, T, d = q.shape
    sc = 1.0 / math.sqrt(d) if scale is None else scale
    lam = lam.expand(v.shape[1])
    heads = []
    for h in range(v.shape[1]):
        rows = []
        for i in range(T):
            keys = torch.arange(i + 1 if causal else T)
            att = []
            for half in (2 * h, 2 * h + 1):
                logit = (q[:, half, i, None, :] * k[:, half, keys]).sum(-1) * sc     # [B, n_keys]
                if bias is not None:
                    logit = logit + bias[half, i, keys]
                att.append(torch.softmax(logit, -1))
            w = att[0] - lam[h] * att[1]
            rows.append((w[..., None] * v[:, h, keys]).sum(-2))                     # [B, 2d]
        heads.append(torch.stack(rows, 1))
    return torch.stack(heads, 1)


def make_inputs(T, seed=0, dtype=torch.float64, per_head_lambda=False):
    g = torch.Generator().manual_seed(100 * seed + T)
    q = torch.randn(B, 2 * H, T, D, generator=g, dtype=dtype)
    k = torch.randn(B, 2 * H, T, D, generator=g, dtype=dtype)
    v = torch.randn(B, H, T, 2 * D, generator=g, dtype=dtype)
    lam = 0.3 + 0.5 * torch.rand(H if per_head_lambda else (), generator=g, dtype=dtype)
    bias = 0.5 * torch.randn(2 * H, T, T, generator=g, dtype=dtype)
    grad_out = torch.randn(B, H, T, 2 * D, generator=g, dtype=dtype)
    return dict(q=q, k=k, v=v, lam=lam, bias=bias), grad_out


def run(fn, inputs, grad_out, use_bias, causal):
    x = {n: t.clone().requires_grad_(True) for n, t in inputs.items()}
    bias_fn = (lambda s, e: x["bias"][:, s:e]) if use_bias else None
    out = fn(x["q"], x["k"], x["v"], x["lam"], x["bias"] if use_bias else None, bias_fn, causal)
    (out * grad_out).sum().backward()
    names = NAMES if use_bias else NAMES[:-1]
    return out.detach(), {n: x[n].grad for n in names}


REF = lambda q, k, v, lam, bias, bias_fn, c: diff_reference(q, k, v, lam, bias, causal=c)  # noqa: E731
NAIVE = lambda q, k, v, lam, bias, bias_fn, c: diff_attention_naive(  # noqa: E731
    q, k, v, lam, causal=c, bias_fn=bias_fn)


def chunked(block):
    return lambda q, k, v, lam, bias, bias_fn, c: diff_attention_chunked(
        q, k, v, lam, causal=c, bias_fn=bias_fn, block_size=block)


@functools.lru_cache(maxsize=None)
def reference(T, use_bias, causal):
    inputs, grad_out = make_inputs(T)
    return run(REF, inputs, grad_out, use_bias, causal)


def assert_match(got, want, **tol):
    (out, grads), (ref_out, ref_grads) = got, want
    torch.testing.assert_close(out, ref_out, **tol)
    assert set(grads) == set(ref_grads)
    for n in ref_grads:
        assert grads[n] is not None and torch.isfinite(grads[n]).all(), n
        torch.testing.assert_close(grads[n], ref_grads[n], **tol, msg=lambda m: f"grad {n}: {m}")


# ----------------------------------------------------------------------------------------------
def test_hand_computed_example():
    # one head pair, d=1, scale=1, T=2, causal: row 1 -> A1 = softmax([0, 1]), A2 = softmax([0, 0])
    q = torch.tensor([[1.0, 1.0], [1.0, 1.0]], dtype=torch.float64).view(1, 2, 2, 1)
    k = torch.tensor([[0.0, 1.0], [0.0, 0.0]], dtype=torch.float64).view(1, 2, 2, 1)
    v = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64).view(1, 1, 2, 2)
    lam = torch.tensor(0.5, dtype=torch.float64)
    a = 1 / (1 + math.e)                                    # A1 weight on key 0
    want = torch.tensor([[1 - 0.5, 0.0],                    # row 0: (1 - lam) v0
                         [a - 0.25, (1 - a) - 0.25]], dtype=torch.float64).view(1, 1, 2, 2)
    for out in (diff_reference(q, k, v, lam, scale=1.0), diff_attention_naive(q, k, v, lam, scale=1.0),
                diff_attention_chunked(q, k, v, lam, scale=1.0, block_size=1)):
        torch.testing.assert_close(out, want, atol=1e-12, rtol=0)


@pytest.mark.parametrize("T", [1, 63, 111])
@pytest.mark.parametrize("use_bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidir"])
def test_naive_matches_reference(T, use_bias, causal):
    inputs, grad_out = make_inputs(T)
    assert_match(run(NAIVE, inputs, grad_out, use_bias, causal), reference(T, use_bias, causal),
                 **F64)


@pytest.mark.parametrize("T", [1, 63, 111])
@pytest.mark.parametrize("block", [7, 16, 512])
@pytest.mark.parametrize("use_bias", [False, True], ids=["nobias", "bias"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidir"])
def test_chunked_matches_naive(T, block, use_bias, causal):
    inputs, grad_out = make_inputs(T, seed=1)
    assert_match(run(chunked(block), inputs, grad_out, use_bias, causal),
                 run(NAIVE, inputs, grad_out, use_bias, causal), **F64)


def test_per_head_lambda():
    inputs, grad_out = make_inputs(40, per_head_lambda=True)
    want = run(REF, inputs, grad_out, True, True)
    assert_match(run(NAIVE, inputs, grad_out, True, True), want, **F64)
    assert_match(run(chunked(9), inputs, grad_out, True, True), want, **F64)


def test_shape_errors():
    q = torch.zeros(1, 3, 4, 2)
    with pytest.raises(ValueError, match="2H"):
        diff_attention_naive(q, q, torch.zeros(1, 1, 4, 4), 0.5)
    with pytest.raises(ValueError, match="2H"):
        diff_attention_chunked(q, q, torch.zeros(1, 1, 4, 4), 0.5)


# ---- the layer -------------------------------------------------------------------------------
def test_lambda_init_schedule():
    assert default_lambda_init(0) == pytest.approx(0.2)
    assert default_lambda_init(1) == pytest.approx(0.8 - 0.6 * math.exp(-0.3))
    assert default_lambda_init(40) == pytest.approx(0.8, abs=1e-5)
    attn = DifferentialAttention(d_model=16, n_heads=4, layer_idx=3)
    assert attn.lambda_init == pytest.approx(0.8 - 0.6 * math.exp(-0.9))
    assert DifferentialAttention(d_model=16, n_heads=4, lambda_init=0.5).lambda_init == 0.5


def rotate_by_hand(x, pos, hd):
    """RoPE with hd-wide frequencies on the last dim of x [B, T, n, hd] (channel c pairs c+hd/2)."""
    out = x.clone()
    for c in range(hd // 2):
        ang = pos.double() * 10000.0 ** (-2 * c / hd)                          # [T]
        cos, sin = torch.cos(ang)[None, :, None], torch.sin(ang)[None, :, None]
        a, b = x[..., c], x[..., c + hd // 2]
        out[..., c], out[..., c + hd // 2] = a * cos - b * sin, a * sin + b * cos
    return out


@pytest.mark.parametrize("posenc", ["nope", "rope"])
def test_layer_matches_independent_recomputation(posenc):
    """Re-derive the layer from its weights in the public code's layout: q/k as n_heads heads of
    hd (pairs 2h, 2h+1; RoPE with hd-wide frequencies on both halves), v as n_heads/2 heads of
    2*hd, lambda, RMSNorm weight, (1 - lambda_init)."""
    torch.manual_seed(0)
    d, n, hd, T = 16, 4, 4, 11
    attn = DifferentialAttention(d_model=d, n_heads=n, layer_idx=2).double()
    with torch.no_grad():
        attn.norm_weight.uniform_(0.5, 1.5)
    scheme = build_posenc(posenc, d_model=d, n_heads=n, head_dim=hd)
    x = torch.randn(2, T, d, dtype=torch.float64)
    pos = torch.arange(T, dtype=torch.float32) * 3 + 5
    got = attn(x, pos, scheme)

    wq, wk, wv = attn.qkv.weight.split(d, 0)
    q, k = (x @ wq.T).view(2, T, n, hd), (x @ wk.T).view(2, T, n, hd)
    if posenc == "rope":
        q, k = rotate_by_hand(q, pos, hd), rotate_by_hand(k, pos, hd)
    v = (x @ wv.T).view(2, T, n // 2, 2 * hd)
    lam_init = 0.8 - 0.6 * math.exp(-0.3 * 2)
    lam = (torch.exp((attn.lambda_q1 * attn.lambda_k1).sum())
           - torch.exp((attn.lambda_q2 * attn.lambda_k2).sum()) + lam_init)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    heads = []
    for h in range(n // 2):
        a1, a2 = [torch.softmax(((q[:, :, c] @ k[:, :, c].transpose(1, 2)) / math.sqrt(hd))
                                .masked_fill(future, float("-inf")), -1) for c in (2 * h, 2 * h + 1)]
        o = (a1 - lam * a2) @ v[:, :, h]                                      # [2, T, 2hd]
        o = o / torch.sqrt(o.pow(2).mean(-1, keepdim=True) + 1e-5) * attn.norm_weight
        heads.append(o * (1 - lam_init))
    want = torch.cat(heads, -1) @ attn.proj.weight.T
    # the RoPE scheme makes its angles in fp32; layout mistakes would show as O(1) differences
    torch.testing.assert_close(got, want, **(F64 if posenc == "nope" else dict(atol=1e-6, rtol=1e-5)))


def tiny(impl="auto", posenc="rope", causal=True, n_heads=4):
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=8, d_model=16, n_heads=n_heads, n_layers=2, attention="diff",
                      posenc=posenc, causal=causal, attn_impl=impl, attn_block_size=8)
    return Transformer(cfg).double().eval()


@pytest.mark.parametrize("impl", ["naive", "lean"])
@pytest.mark.parametrize("posenc", ["rope", "alibi"])
def test_causal_in_a_transformer(impl, posenc):
    model = tiny(impl, posenc)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 8, (2, 30), generator=g)
    y = x.clone()
    y[:, 17:] = (x[:, 17:] + 1 + torch.randint(0, 7, (2, 13), generator=g)) % 8
    with torch.no_grad():
        a, b = model(x), model(y)
    torch.testing.assert_close(a[:, :17], b[:, :17], atol=1e-12, rtol=0)
    assert (a[:, 17:] - b[:, 17:]).abs().amax() > 1e-3


@pytest.mark.parametrize("causal", [True, False])
def test_lean_and_naive_paths_agree_in_model(causal):
    x = torch.randint(0, 8, (2, 29), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(tiny("lean", causal=causal)(x), tiny("naive", causal=causal)(x),
                                   **F64)


def test_odd_heads_rejected():
    with pytest.raises(ValueError, match="even n_heads"):
        tiny(n_heads=1)
    with pytest.raises(ValueError, match="even n_heads"):
        Transformer(ModelConfig(d_model=12, n_heads=3, attention="diff"))


def test_lambda_vector_init_survives_model_init():
    torch.manual_seed(0)
    model = Transformer(ModelConfig(d_model=512, n_heads=2, n_layers=1, attention="diff"))
    attn = model.blocks[0].attn
    lams = torch.cat([attn.lambda_q1, attn.lambda_k1, attn.lambda_q2, attn.lambda_k2])
    assert lams.numel() == 4 * 256
    assert 0.09 < lams.std().item() < 0.11 and abs(lams.mean().item()) < 0.02
    assert torch.equal(attn.norm_weight, torch.ones(512))


def test_record_weights_are_differential():
    model = tiny()
    model.record_attention(True)
    with torch.no_grad():
        model(torch.randint(0, 8, (1, 9)))
    w = model.blocks[1].attn.last_weights
    assert w.shape == (1, 2, 9, 9)                           # n_heads // 2 maps
    lam = model.blocks[1].attn.lambda_full().item()
    torch.testing.assert_close(w.sum(-1), torch.full((1, 2, 9), 1 - lam, dtype=w.dtype))
