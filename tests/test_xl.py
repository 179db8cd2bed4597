"""Transformer-XL relative encoding: the bias hook against a hand-computed matrix, full attention
against a reference written from the XL logit equation (values and gradients, float64), the
table and trig paths against each other, left/right keys in a bidirectional encoder, and
causality inside a tiny Transformer.
"""
from __future__ import annotations

import functools
import math

import pytest
import torch

from lengen.model.config import ModelConfig
from lengen.model.transformer import Transformer
from lengen.ops.softmax import softmax_attention_chunked, softmax_attention_naive
from lengen.posenc.xl import TransformerXLRelative
from lengen.samplers import RandomizedSampler

F64 = dict(atol=1e-10, rtol=1e-8)
B, H, D, RD = 2, 2, 4, 6       # RD: width of the sinusoid R (3 frequencies)
NAMES = ("q", "k", "val", "u", "v", "w_r")


def xl_reference(q, k, val, u, v, w_r, pos, causal, base=10000.0):
    """logits_ij = (q_i.k_j + u.k_j + (q_i + v).W_r R(pos_i - pos_j)) / sqrt(d), one row at a time;
    R(r) = [sin(r w_f) for f] ++ [cos(r w_f) for f], w_f = base^(-2f / RD)."""
    _, _, T, d = q.shape
    freqs = base ** (-torch.arange(0, w_r.shape[1], 2, dtype=torch.float64) / w_r.shape[1])
    rows = []
    for i in range(T):
        n = i + 1 if causal else T
        r = pos[i].double() - pos[:n].double()                               # [n]
        R = torch.cat([torch.sin(r[:, None] * freqs), torch.cos(r[:, None] * freqs)], -1)
        wr = (R @ w_r.T).view(n, H, d).transpose(0, 1)                         # [H, n, d]
        qi = q[:, :, i, None, :]                                               # [B, H, 1, d]
        logits = ((qi * k[:, :, :n]).sum(-1) + (u[None, :, None] * k[:, :, :n]).sum(-1)
                  + ((qi + v[None, :, None]) * wr[None]).sum(-1)) / math.sqrt(d)
        w = torch.softmax(logits, -1)                                          # [B, H, n]
        rows.append((w[..., None] * val[:, :, :n]).sum(-2))
    return torch.stack(rows, 2)


def positions(kind, T):
    if kind == "identity":
        return torch.arange(T, dtype=torch.float32)
    if kind == "randomized":
        return RandomizedSampler(2048).sample(T, training=True, generator=torch.Generator().manual_seed(T))
    return torch.arange(T, dtype=torch.float32) * 0.37 + 0.5                  # fractional


def make_inputs(T, seed=0):
    g = torch.Generator().manual_seed(100 * seed + T)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)          # noqa: E731
    inputs = dict(q=r(B, H, T, D), k=r(B, H, T, D), val=r(B, H, T, D), u=r(H, D), v=r(H, D),
                  w_r=r(H * D, RD))
    return inputs, r(B, H, T, D)


def make_xl(causal, path="auto", inputs=None):
    xl = TransformerXLRelative(d_model=H * D, n_heads=H, head_dim=D, causal=causal, rel_dim=RD,
                               path=path).double()
    if inputs is not None:
        with torch.no_grad():
            xl.u.copy_(inputs["u"]), xl.v.copy_(inputs["v"]), xl.w_r.weight.copy_(inputs["w_r"])
    return xl


def run(impl, inputs, grad_out, pos, causal, path="auto", block=16):
    x = {n: inputs[n].clone().requires_grad_(True) for n in ("q", "k", "val")}
    if impl == "reference":
        p = {n: inputs[n].clone().requires_grad_(True) for n in ("u", "v", "w_r")}
        out = xl_reference(x["q"], x["k"], x["val"], p["u"], p["v"], p["w_r"], pos, causal)
    else:
        xl = make_xl(causal, path, inputs)
        p = dict(u=xl.u, v=xl.v, w_r=xl.w_r.weight)
        bias_fn = lambda s, e: xl.bias(pos[s:e], pos, x["q"][:, :, s:e], x["k"])   # noqa: E731
        if impl == "naive":
            out = softmax_attention_naive(x["q"], x["k"], x["val"], causal=causal, bias_fn=bias_fn)
        else:
            out = softmax_attention_chunked(x["q"], x["k"], x["val"], causal=causal,
                                            bias_fn=bias_fn, block_size=block)
    (out * grad_out).sum().backward()
    grads = {n: t.grad for n, t in {**x, **p}.items()}
    return out.detach(), grads


@functools.lru_cache(maxsize=None)
def reference(T, kind, causal):
    inputs, grad_out = make_inputs(T)
    return run("reference", inputs, grad_out, positions(kind, T), causal)


def assert_match(got, want, **tol):
    (out, grads), (ref_out, ref_grads) = got, want
    torch.testing.assert_close(out, ref_out, **tol)
    assert set(grads) == set(ref_grads) == set(NAMES)
    for n in NAMES:
        assert grads[n] is not None and torch.isfinite(grads[n]).all(), n
        torch.testing.assert_close(grads[n], ref_grads[n], **tol, msg=lambda m: f"grad {n}: {m}")


# ---- the bias hook on a hand-computed example -------------------------------------------------
def hand_example(path, causal=False):
    # one head, d=2, R of width 2 with w = 1: R(r) = (sin r, cos r); W_r = I, u = (1, 0), v = (0, 1)
    xl = TransformerXLRelative(d_model=2, n_heads=1, head_dim=2, causal=causal, rel_dim=2, path=path)
    with torch.no_grad():
        xl.w_r.weight.copy_(torch.eye(2)), xl.u.copy_(torch.tensor([[1.0, 0.0]]))
        xl.v.copy_(torch.tensor([[0.0, 1.0]]))
    q = torch.tensor([[1.0, 0.0], [0.0, 0.0], [2.0, 0.0]]).view(1, 1, 3, 2)
    k = torch.tensor([[1.0, 0.0], [0.0, 3.0], [-1.0, 0.0]]).view(1, 1, 3, 2)
    return xl.bias(torch.arange(3.0), torch.arange(3.0), q, k)[0, 0]


@pytest.mark.parametrize("path", ["auto", "table", "trig"])
def test_bias_matches_hand_computed_matrix(path):
    # bias_ij = (u.k_j + q_i0 sin(i - j) + cos(i - j)) / sqrt(2), with u.k = (1, 0, -1)
    s, c = math.sin, math.cos
    want = torch.tensor([[1 + 0 + 1, 0 + s(-1) + c(-1), -1 + s(-2) + c(-2)],
                         [1 + 0 + c(1), 0 + 0 + 1, -1 + 0 + c(-1)],
                         [1 + 2 * s(2) + c(2), 0 + 2 * s(1) + c(1), -1 + 0 + 1]]) / math.sqrt(2)
    torch.testing.assert_close(hand_example(path), want, atol=1e-6, rtol=0)


# ---- full attention against the equations ----------------------------------------------------
@pytest.mark.parametrize("T", [1, 63, 111])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidir"])
def test_naive_matches_reference_identity_positions(T, causal):
    inputs, grad_out = make_inputs(T)
    pos = positions("identity", T)
    assert_match(run("naive", inputs, grad_out, pos, causal), reference(T, "identity", causal), **F64)


@pytest.mark.parametrize("kind", ["randomized", "fractional"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidir"])
def test_naive_matches_reference_other_positions(kind, causal):
    inputs, grad_out = make_inputs(63)
    pos = positions(kind, 63)
    assert_match(run("naive", inputs, grad_out, pos, causal), reference(63, kind, causal), **F64)


@pytest.mark.parametrize("kind", ["identity", "randomized"])
@pytest.mark.parametrize("path", ["table", "trig"])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidir"])
def test_both_paths_match_reference(kind, path, causal):
    inputs, grad_out = make_inputs(63)
    pos = positions(kind, 63)
    assert_match(run("naive", inputs, grad_out, pos, causal, path=path),
                 reference(63, kind, causal), **F64)


@pytest.mark.parametrize("T", [1, 63, 111])
@pytest.mark.parametrize("block", [7, 37])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "bidir"])
def test_chunked_matches_naive(T, block, causal):
    inputs, grad_out = make_inputs(T, seed=1)
    pos = positions("randomized", T)
    assert_match(run("chunked", inputs, grad_out, pos, causal, block=block),
                 run("naive", inputs, grad_out, pos, causal), **F64)


def test_auto_path_choice(monkeypatch):
    calls = []
    for name in ("position_term_table", "position_term_trig"):
        orig = getattr(TransformerXLRelative, name)
        monkeypatch.setattr(TransformerXLRelative, name,
                            lambda self, *a, _o=orig, _n=name: calls.append(_n) or _o(self, *a))
    inputs, _ = make_inputs(40)
    xl = TransformerXLRelative(d_model=4 * D, n_heads=H, head_dim=D, causal=False).double()
    for kind in ("identity", "fractional", "randomized"):
        pos = positions(kind, 40)
        xl.bias(pos, pos, inputs["q"], inputs["k"])
    # cost per query and head: table = distinct distances * hd, trig = keys * rel_dim (16 here).
    # identity: 79 * 4 < 40 * 16, a table; fractional: trig; 40 positions spread over [0, 2048)
    # give thousands of distances: trig
    assert calls == ["position_term_table", "position_term_trig", "position_term_trig"]
    with pytest.raises(ValueError, match="integer"):
        make_xl(False, "table").bias(positions("fractional", 5), positions("fractional", 5),
                                     inputs["q"][:, :, :5], inputs["k"][:, :, :5])


# ---- left and right keys ---------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["identity", "randomized"])
@pytest.mark.parametrize("path", ["table", "trig"])
def test_bidirectional_keys_left_and_right_are_distinct(kind, path):
    torch.manual_seed(0)
    T = 24
    xl = make_xl(False, path).double()
    with torch.no_grad():
        xl.v.normal_(), xl.u.zero_()
    q = torch.zeros(1, H, T, D, dtype=torch.float64)       # keep only v.W_r R(pos_i - pos_j)
    pos = positions(kind, T)
    b = xl.bias(pos, pos, q, torch.randn(1, H, T, D, dtype=torch.float64))[0]   # [H, T, T]
    for i in range(T):
        right = b[:, i, i + 1:]
        # every key right of the query has its own encoding (the released randomized-relative
        # code gives them all one value) ...
        for h in range(H):
            assert right[h].unique().numel() == right.shape[-1]
        # ... and mirror keys at the same distance on the left and the right differ
        for dist in range(1, min(i, T - 1 - i) + 1):
            assert ((b[:, i, i - dist] - b[:, i, i + dist]).abs() > 1e-6).all()


# ---- in a model ------------------------------------------------------------------------------
def tiny(impl, causal=True, attention="softmax", positions_name="identity"):
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=8, d_model=16, n_heads=2, n_layers=2, posenc="xl",
                      attention=attention, causal=causal, attn_impl=impl, attn_block_size=8,
                      positions=positions_name)
    model = Transformer(cfg).double().eval()
    with torch.no_grad():      # bigger position terms so a leak would be visible
        model.posenc.w_r.weight.normal_(), model.posenc.u.normal_(), model.posenc.v.normal_()
    return model


@pytest.mark.parametrize("impl", ["naive", "lean"])
@pytest.mark.parametrize("attention", ["softmax", "tra", "cope", "diff"])
def test_causal_in_a_transformer(impl, attention):
    model = tiny(impl, attention=attention)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 8, (2, 30), generator=g)
    y = x.clone()
    y[:, 17:] = (x[:, 17:] + 1 + torch.randint(0, 7, (2, 13), generator=g)) % 8
    with torch.no_grad():
        a, b = model(x), model(y)
    torch.testing.assert_close(a[:, :17], b[:, :17], atol=1e-12, rtol=0)
    assert (a[:, 17:] - b[:, 17:]).abs().amax() > 1e-3


def test_bidirectional_model_lean_matches_naive():
    x = torch.randint(0, 8, (2, 29), generator=torch.Generator().manual_seed(1))
    pos = positions("randomized", 29)
    with torch.no_grad():
        torch.testing.assert_close(tiny("lean", causal=False)(x, pos),
                                   tiny("naive", causal=False)(x, pos), **F64)


def test_model_learns_through_all_parameters():
    model = tiny("auto").train()
    model(torch.randint(0, 8, (2, 12))).sum().backward()
    for p in (model.posenc.u, model.posenc.v, model.posenc.w_r.weight):
        assert p.grad is not None and p.grad.abs().sum() > 0
