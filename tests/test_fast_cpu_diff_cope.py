"""Fast training paths of differential attention (``lengen/ops/diff/fast_cpu.py``: SDPA on
zero-padded q/k, or the tiled softmax op with a bias) and CoPE (``lengen/ops/cope/fast_cpu.py``:
tiled, hand-written backward) against the dense references. CoPE runs twice: with its per-row C
kernels (``lengen/ops/cope/cope_rows.c``) and with their PyTorch fallback.

Outputs and every gradient (q, k, v, lambda / position embeddings, a learnable bias through
``bias_fn``), float64 and float32, odd lengths, default and tiny tiles, causality, and the
modules' ``impl='auto'`` training path against ``impl='naive'``.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

from lengen.attention.cope import ContextualPositionAttention
from lengen.attention.diff import DifferentialAttention
from lengen.ops import ckernels
from lengen.ops.cope import cope_attention_naive
from lengen.ops.cope.fast_cpu import cope_attention_fast_cpu
from lengen.ops.diff import diff_attention_naive
from lengen.ops.diff.fast_cpu import diff_attention_fast_cpu
from lengen.posenc import build_posenc

B, H, D = 2, 4, 6                       # diff: H ordinary heads -> H // 2 differential heads
TOL = {torch.float64: 1e-10, torch.float32: 3e-5}            # max error / max(|reference|, 1)
TILES = {"default": {}, "tiny": dict(budget=700, qblock=16)}


@pytest.fixture(params=[
    pytest.param("c", marks=pytest.mark.skipif(
        ckernels.compiler() is None,
        reason="no C compiler here (cc/gcc/clang, or pip install 'lengen[ckernels]')")),
    "torch"])
def cope_path(request, monkeypatch):
    """CoPE's row logic in the C kernels (must load where a compiler exists) or in PyTorch."""
    from lengen.ops.cope import rows

    monkeypatch.setenv("LENGEN_C_KERNELS", "1" if request.param == "c" else "0")
    ckernels.reset()
    assert (rows.kernels() is not None) == (request.param == "c")
    yield request.param
    ckernels.reset()


def make_inputs(kind, T, dtype, npos, pe_heads):
    g = torch.Generator().manual_seed(7 * T + npos)
    r = lambda *s: torch.randn(*s, generator=g, dtype=dtype)    # noqa: E731
    if kind == "diff":
        x = dict(q=r(B, H, T, D), k=r(B, H, T, D), v=r(B, H // 2, T, 2 * D),
                 extra=torch.tensor(0.37, dtype=dtype), bias=0.5 * r(H, T, T))
    else:
        # large q/k: gates far from 0.5 and positions spread over many buckets and the clamp
        pe = r(H, D, npos) if pe_heads else r(D, npos)
        x = dict(q=2 * r(B, H, T, D), k=2 * r(B, H, T, D), v=r(B, H, T, D), extra=pe,
                 bias=0.5 * r(H, T, T))
    return x


def run(op, x, use_bias, seed=3, **kw):
    x = {n: t.clone().requires_grad_(True) for n, t in x.items()}
    bias_fn = (lambda s, e: x["bias"][:, s:e]) if use_bias else None
    out = op(x["q"], x["k"], x["v"], x["extra"], bias_fn=bias_fn, **kw)
    go = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=out.dtype)
    (out * go).sum().backward()
    names = ["q", "k", "v", "extra"] + (["bias"] if use_bias else [])
    return [out.detach()] + [torch.zeros_like(x[n]) if x[n].grad is None else x[n].grad
                             for n in names]


def assert_matches(got, ref, dtype, what):
    for name, a, b in zip(["out", "dq", "dk", "dv", "dextra", "dbias"], got, ref):
        assert a.shape == b.shape, f"{what}: {name} shape {tuple(a.shape)} != {tuple(b.shape)}"
        assert torch.isfinite(a).all(), f"{what}: non-finite {name}"
        err = (a - b).abs().max().item()
        scale = max(b.abs().max().item(), 1.0)
        assert err <= TOL[dtype] * scale, f"{what}: {name} off by {err:.2e} (scale {scale:.2e})"


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("T", [1, 63, 111, 300])
@pytest.mark.parametrize("use_bias", [False, True])
def test_diff_fast_matches_reference(dtype, T, use_bias):
    x = make_inputs("diff", T, dtype, 0, False)
    ref = run(diff_attention_naive, x, use_bias)
    got = run(diff_attention_fast_cpu, x, use_bias)
    assert_matches(got, ref, dtype, f"diff T={T} bias={use_bias}")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("T", [1, 63, 111, 300])
@pytest.mark.parametrize("use_bias", [False, True])
@pytest.mark.parametrize("tiles", list(TILES))
def test_cope_fast_matches_reference(dtype, T, use_bias, tiles, cope_path):
    npos, pe_heads = (16, False) if T % 2 else (7, True)      # odd npos, per-head tables
    x = make_inputs("cope", T, dtype, npos, pe_heads)
    ref = run(cope_attention_naive, x, use_bias)
    got = run(cope_attention_fast_cpu, x, use_bias, **TILES[tiles])
    assert_matches(got, ref, dtype, f"cope T={T} bias={use_bias} tiles={tiles} {cope_path}")


def test_cope_large_table_and_custom_scale(cope_path):
    """npos larger than T (nothing clamped) and a non-default scale."""
    x = make_inputs("cope", 40, torch.float64, 64, False)
    ref = run(lambda *a, **k: cope_attention_naive(*a, scale=0.2, **k), x, True)
    got = run(lambda *a, **k: cope_attention_fast_cpu(*a, scale=0.2, **k), x, True)
    assert_matches(got, ref, torch.float64, "cope npos=64 scale=0.2")


@pytest.mark.parametrize("kind", ["diff", "cope"])
def test_future_inputs_change_nothing(kind, cope_path):
    """Causality: perturbing keys/values at positions >= t leaves outputs before t unchanged and
    gives those positions no gradient from earlier outputs."""
    T, t = 50, 31
    x = make_inputs(kind, T, torch.float64, 9, False)
    op = diff_attention_fast_cpu if kind == "diff" else cope_attention_fast_cpu
    kw = {} if kind == "diff" else TILES["tiny"]
    y0 = op(x["q"], x["k"], x["v"], x["extra"], **kw)
    x2 = dict(x)
    for n in ("k", "v"):
        x2[n] = x[n].clone()
        x2[n][:, :, t:] += 5 * torch.randn_like(x[n][:, :, t:])
    y1 = op(x2["q"], x2["k"], x2["v"], x2["extra"], **kw)
    assert torch.equal(y0[:, :, :t], y1[:, :, :t])
    assert not torch.allclose(y0[:, :, t:], y1[:, :, t:])
    k, v = x["k"].clone().requires_grad_(True), x["v"].clone().requires_grad_(True)
    op(x["q"], k, v, x["extra"], **kw)[:, :, :t].sum().backward()
    assert (k.grad[:, :, t:] == 0).all() and (v.grad[:, :, t:] == 0).all()
    assert (k.grad[:, :, :t] != 0).any() and (v.grad[:, :, :t] != 0).any()


def test_cope_second_backward_raises():
    x = make_inputs("cope", 20, torch.float64, 5, False)
    q = x["q"].requires_grad_(True)
    out = cope_attention_fast_cpu(q, x["k"], x["v"], x["extra"]).sum()
    out.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="backward called twice"):
        out.backward()


@pytest.mark.parametrize("cls,kw", [(DifferentialAttention, dict(layer_idx=2)),
                                    (ContextualPositionAttention, dict(npos=10))])
@pytest.mark.parametrize("posenc", ["nope", "rope", "alibi", "kerple_log", "fire"])
def test_modules_auto_equals_naive(cls, kw, posenc):
    """impl='auto' in training (the fast path) equals impl='naive': outputs, parameter grads."""
    torch.manual_seed(0)
    d, T = 32, 45
    pe = build_posenc(posenc, d_model=d, n_heads=4, head_dim=8, causal=True).double()
    mods = {}
    for impl in ("naive", "auto"):
        torch.manual_seed(1)
        mods[impl] = cls(d_model=d, n_heads=4, impl=impl, **kw).double().train()
        if cls is ContextualPositionAttention:          # zero at init: make the table matter
            with torch.no_grad():
                mods[impl].pos_emb.copy_(torch.randn(mods[impl].pos_emb.shape,
                                                     generator=torch.Generator().manual_seed(2)))
    x = 3 * torch.randn(3, T, d, dtype=torch.float64)
    pos = torch.arange(T, dtype=torch.float64)
    res = {}
    for impl, m in mods.items():
        y = m(x, pos, pe)
        (y * torch.linspace(-1, 1, d, dtype=torch.float64)).sum().backward()
        res[impl] = [y.detach()] + [p.grad.clone() for p in m.parameters()]
    for a, b in zip(res["auto"], res["naive"]):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-8)


def test_default_training_ops_are_fast_on_cpu():
    q = torch.zeros(1, 2, 4, 8)
    diff = DifferentialAttention(d_model=8, n_heads=2)
    assert diff.training_op(q, q, q, None, None) is diff_attention_fast_cpu
    assert diff.training_op(q, q, q, lambda s, e: None, None) is diff_attention_fast_cpu
    assert ContextualPositionAttention.ops.training(q) is cope_attention_fast_cpu


@pytest.mark.parametrize("cls", [DifferentialAttention, ContextualPositionAttention])
def test_modules_route_auto_to_fast_and_naive_to_reference(cls, monkeypatch):
    """impl='auto' training calls the fast op, impl='naive' and eval never do."""
    calls = []
    real = cls.ops.fast_cpu
    monkeypatch.setattr(cls, "ops", dataclasses.replace(
        cls.ops, fast_cpu=lambda *a, **k: calls.append(1) or real(*a, **k)))
    pe = build_posenc("nope", d_model=16, n_heads=4, head_dim=4, causal=True)
    x, pos = torch.randn(1, 9, 16), torch.arange(9.0)
    for impl, train, expect in [("auto", True, 1), ("naive", True, 0), ("auto", False, 0)]:
        calls.clear()
        m = cls(d_model=16, n_heads=4, impl=impl).train(train)
        m(x, pos, pe)
        assert len(calls) == expect, (impl, train)
