"""CoPE (contextual position encoding): ops against a loop-over-positions reference, and the
attention kind inside a tiny Transformer.

The reference builds each query row on its own: p_ij as a literal sum of the gates g_it over
t = j..i (no cumulative sum, no mask), then clamps and interpolates the two neighbouring position
logits. float64,
values and gradients w.r.t. q, k, v, the position embeddings and a bias passed via ``bias_fn``.
"""
from __future__ import annotations

import functools
import math

import pytest
import torch

from lengen.attention.cope import ContextualPositionAttention
from lengen.model.config import ModelConfig
from lengen.model.transformer import Transformer
from lengen.ops.cope import cope_attention_chunked, cope_attention_naive

F64 = dict(atol=1e-10, rtol=1e-8)
B, H, D, NPOS = 2, 2, 4, 30       # gates average ~0.5: T=111 clamps often, T=63 rarely
NAMES = ("q", "k", "v", "pos_emb", "bias")


def cope_reference(q, k, v, pos_emb, bias=None, scale=None):
    """Straight from the equations, one query row at a time; p_ij is a literal sum over t=j..i."""
    _, _, T, d = q.shape
    npos = pos_emb.shape[-1]
    sc = 1.0 / math.sqrt(d) if scale is None else scale
    rows = []
    for i in range(T):
        s = (q[:, :, i, None, :] * k[:, :, : i + 1]).sum(-1)      # q_i . k_j, j <= i: [B, H, i+1]
        g = torch.sigmoid(s * sc)                                  # gates g_ij
        p = torch.stack([g[..., j:].sum(-1) for j in range(i + 1)], -1)   # sum_{t=j..i} g_it
        p = torch.clamp(p, max=npos - 1)
        lo, hi = torch.floor(p.detach()).long(), torch.ceil(p.detach()).long()
        frac = p - lo
        z = (q[:, :, i, None, :] @ pos_emb)[:, :, 0]             # q_i . e[n], n < npos: [B, H, npos]
        e = (1 - frac) * z.gather(-1, lo) + frac * z.gather(-1, hi)
        logits = (s + e) * sc
        if bias is not None:
            logits = logits + bias[:, i, : i + 1]
        w = torch.softmax(logits, -1)                              # [B, H, i+1]
        rows.append((w[..., None] * v[:, :, : i + 1]).sum(-2))
    return torch.stack(rows, 2)


def make_inputs(T, seed=0, dtype=torch.float64, d=D, per_head=False):
    g = torch.Generator().manual_seed(100 * seed + T)
    q = torch.randn(B, H, T, d, generator=g, dtype=dtype)
    k = torch.randn(B, H, T, d, generator=g, dtype=dtype)
    v = torch.randn(B, H, T, d, generator=g, dtype=dtype)
    shape = (H, d, NPOS) if per_head else (d, NPOS)
    pos_emb = torch.randn(*shape, generator=g, dtype=dtype)
    bias = 0.5 * torch.randn(H, T, T, generator=g, dtype=dtype)
    grad_out = torch.randn(B, H, T, d, generator=g, dtype=dtype)
    return dict(q=q, k=k, v=v, pos_emb=pos_emb, bias=bias), grad_out


def run(fn, inputs, grad_out, use_bias):
    x = {n: t.clone().requires_grad_(True) for n, t in inputs.items()}
    bias_fn = (lambda s, e: x["bias"][:, s:e]) if use_bias else None
    out = fn(x["q"], x["k"], x["v"], x["pos_emb"], x["bias"] if use_bias else None, bias_fn)
    (out * grad_out).sum().backward()
    names = NAMES if use_bias else NAMES[:-1]
    return out.detach(), {n: x[n].grad for n in names}


REF = lambda q, k, v, e, bias, bias_fn: cope_reference(q, k, v, e, bias=bias)        # noqa: E731
NAIVE = lambda q, k, v, e, bias, bias_fn: cope_attention_naive(q, k, v, e, bias_fn=bias_fn)  # noqa: E731


def chunked(block):
    return lambda q, k, v, e, bias, bias_fn: cope_attention_chunked(q, k, v, e, bias_fn=bias_fn,
                                                                    block_size=block)


@functools.lru_cache(maxsize=None)
def reference(T, use_bias, per_head=False):
    inputs, grad_out = make_inputs(T, per_head=per_head)
    return run(REF, inputs, grad_out, use_bias)


def assert_match(got, want, **tol):
    (out, grads), (ref_out, ref_grads) = got, want
    torch.testing.assert_close(out, ref_out, **tol)
    assert set(grads) == set(ref_grads)
    for n in ref_grads:
        assert grads[n] is not None and torch.isfinite(grads[n]).all(), n
        if out.shape[-2] > 1:   # with one key only v matters
            assert grads[n].abs().sum() > 0, f"no gradient reaches {n}"
        torch.testing.assert_close(grads[n], ref_grads[n], **tol, msg=lambda m: f"grad {n}: {m}")


# ----------------------------------------------------------------------------------------------
def test_hand_computed_example_with_clamp():
    # d=1, scale=1, all scores 0 -> every gate 0.5; row 2 positions 1.5, 1.0, 0.5, clamped to
    # npos-1 = 1 -> [1, 1, 0.5]; e = [0, 2] so E(p) = 2p -> logits [2, 2, 1]
    q = torch.ones(1, 1, 3, 1, dtype=torch.float64)
    k = torch.zeros(1, 1, 3, 1, dtype=torch.float64)
    v = torch.tensor([10.0, 20.0, 30.0], dtype=torch.float64).view(1, 1, 3, 1)
    e = torch.tensor([[0.0, 2.0]], dtype=torch.float64)
    e1, e2 = math.e, math.e ** 2
    want = torch.tensor([10.0,                                          # row 0: only key 0
                         (e2 * 10 + e1 * 20) / (e2 + e1),               # row 1: logits [2, 1]
                         (e2 * 10 + e2 * 20 + e1 * 30) / (2 * e2 + e1)],
                        dtype=torch.float64).view(1, 1, 3, 1)
    for out in (cope_reference(q, k, v, e, scale=1.0),
                cope_attention_naive(q, k, v, e, scale=1.0),
                cope_attention_chunked(q, k, v, e, scale=1.0, block_size=2)):
        torch.testing.assert_close(out, want, atol=1e-12, rtol=0)


def test_inputs_exercise_clamp_and_interpolation():
    inputs, _ = make_inputs(111)
    s = (inputs["q"] @ inputs["k"].transpose(-1, -2)) / math.sqrt(D)
    g = torch.sigmoid(s).tril()
    p = g.flip(-1).cumsum(-1).flip(-1)[..., torch.ones(111, 111, dtype=torch.bool).tril()]
    assert 0.1 < (p > NPOS - 1).double().mean() < 0.9              # clamped and free positions
    frac = p - p.floor()
    assert 0.2 < frac.mean() < 0.8                                  # genuinely fractional


@pytest.mark.parametrize("T", [1, 63, 111])
@pytest.mark.parametrize("use_bias", [False, True], ids=["nobias", "bias"])
def test_naive_matches_reference(T, use_bias):
    inputs, grad_out = make_inputs(T)
    assert_match(run(NAIVE, inputs, grad_out, use_bias), reference(T, use_bias), **F64)


@pytest.mark.parametrize("T", [63, 111])
def test_chunked_matches_reference(T):
    inputs, grad_out = make_inputs(T)
    assert_match(run(chunked(16), inputs, grad_out, True), reference(T, True), **F64)


@pytest.mark.parametrize("T", [1, 63, 111])
@pytest.mark.parametrize("block", [1, 7, 37, 512])
def test_chunked_matches_naive(T, block):
    inputs, grad_out = make_inputs(T, seed=1)
    assert_match(run(chunked(block), inputs, grad_out, True), run(NAIVE, inputs, grad_out, True),
                 **F64)


def test_per_head_position_embeddings():
    inputs, grad_out = make_inputs(63, per_head=True)
    want = reference(63, True, per_head=True)
    assert_match(run(NAIVE, inputs, grad_out, True), want, **F64)
    assert_match(run(chunked(10), inputs, grad_out, True), want, **F64)


def test_chunked_matches_naive_float32_long():
    inputs, grad_out = make_inputs(300, seed=3, dtype=torch.float32, d=8)
    assert_match(run(chunked(64), inputs, grad_out, True), run(NAIVE, inputs, grad_out, True),
                 atol=2e-5, rtol=1e-4)


# ---- the attention kind ----------------------------------------------------------------------
def tiny(impl="auto", **kw):
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=8, d_model=16, n_heads=2, n_layers=2, attention="cope",
                      attn_impl=impl, attn_block_size=8, **kw)
    model = Transformer(cfg).double()
    for blk in model.blocks:   # zero-initialised position logits would hide position bugs
        torch.nn.init.normal_(blk.attn.pos_emb)
    return model.eval()


@pytest.mark.parametrize("impl", ["naive", "lean"])
def test_causal_in_a_transformer(impl):
    model = tiny(impl, attention_kwargs={"npos": 8})
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 8, (2, 30), generator=g)
    y = x.clone()
    y[:, 17:] = (x[:, 17:] + 1 + torch.randint(0, 7, (2, 13), generator=g)) % 8   # all differ
    with torch.no_grad():
        a, b = model(x), model(y)
    torch.testing.assert_close(a[:, :17], b[:, :17], atol=1e-12, rtol=0)
    assert (a[:, 17:] - b[:, 17:]).abs().amax() > 1e-3


def test_lean_and_naive_paths_agree_in_model():
    x = torch.randint(0, 8, (2, 29), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(tiny("lean")(x), tiny("naive")(x), **F64)


def test_defaults_and_zero_init_still_learns():
    torch.manual_seed(0)
    attn = ContextualPositionAttention(d_model=16, n_heads=2)
    assert attn.npos == 64 and attn.pos_emb.shape == (8, 64)
    model = Transformer(ModelConfig(vocab_size=8, d_model=16, n_heads=2, n_layers=1,
                                    attention="cope"))
    assert torch.equal(model.blocks[0].attn.pos_emb, torch.zeros(8, 64))   # paper init survives
    model(torch.randint(0, 8, (2, 12))).sum().backward()
    assert model.blocks[0].attn.pos_emb.grad.abs().sum() > 0


def test_rejects_bidirectional_and_bad_npos():
    with pytest.raises(ValueError, match="causal"):
        ContextualPositionAttention(d_model=16, n_heads=2, causal=False)
    with pytest.raises(ValueError, match="npos"):
        ContextualPositionAttention(d_model=16, n_heads=2, npos=0)


def test_record_weights_rows_sum_to_one():
    model = tiny()
    model.record_attention(True)
    with torch.no_grad():
        model(torch.randint(0, 8, (1, 9)))
    w = model.blocks[0].attn.last_weights
    assert w.shape == (1, 2, 9, 9)
    torch.testing.assert_close(w.sum(-1), torch.ones(1, 2, 9, dtype=w.dtype))
    assert torch.equal(w.triu(1), torch.zeros_like(w))
