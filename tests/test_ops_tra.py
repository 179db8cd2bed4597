"""TRA ops (dense reference and query-blocked) against the loop-over-positions reference.

float64 throughout except the last test; outputs and gradients w.r.t. q, k, v, log_gate and a
learnable bias passed through ``bias_fn``. Odd lengths, block sizes that do and do not divide T,
and query rows without any surviving key (which must output exactly zero, with no NaN).
"""
from __future__ import annotations

import functools
import math

import pytest
import torch
import torch.nn.functional as F
from reference_loops import tra_reference

from lengen.ops.tra import tra_attention_chunked, tra_attention_naive

F64 = dict(atol=1e-10, rtol=1e-8)     # float64: reference and ops agree to rounding
NAMES = ("q", "k", "v", "log_gate", "bias")
B, H, D = 2, 2, 4


def make_inputs(T, seed=0, dtype=torch.float64, d=D):
    g = torch.Generator().manual_seed(1000 * seed + T)
    q = torch.randn(B, H, T, d, generator=g, dtype=dtype)
    k = torch.randn(B, H, T, d, generator=g, dtype=dtype)
    v = torch.randn(B, H, T, d, generator=g, dtype=dtype)
    log_gate = F.logsigmoid(torch.randn(B, H, T, generator=g, dtype=dtype))
    bias = 0.5 * torch.randn(H, T, T, generator=g, dtype=dtype)
    grad_out = torch.randn(B, H, T, d, generator=g, dtype=dtype)
    return dict(q=q, k=k, v=v, log_gate=log_gate, bias=bias), grad_out


def run(fn, inputs, grad_out, use_bias):
    """fn(q, k, v, log_gate, bias_or_None, bias_fn_or_None) -> out; returns out and grads."""
    x = {n: t.clone().requires_grad_(True) for n, t in inputs.items()}
    bias_fn = (lambda s, e: x["bias"][:, s:e]) if use_bias else None     # [H, e-s, T]
    out = fn(x["q"], x["k"], x["v"], x["log_gate"], x["bias"] if use_bias else None, bias_fn)
    (out * grad_out).sum().backward()
    names = NAMES if use_bias else NAMES[:-1]
    # an input the output does not depend on (log_f at T=1 in the loop reference) has no grad
    return out.detach(), {n: torch.zeros_like(x[n]) if x[n].grad is None else x[n].grad
                          for n in names}


def ref_fn(scale=None):
    return lambda q, k, v, lg, bias, bias_fn: tra_reference(q, k, v, lg, bias=bias, scale=scale)


def naive_fn(scale=None):
    return lambda q, k, v, lg, bias, bias_fn: tra_attention_naive(q, k, v, lg, bias_fn=bias_fn,
                                                                  scale=scale)


def chunked_fn(block, scale=None):
    return lambda q, k, v, lg, bias, bias_fn: tra_attention_chunked(
        q, k, v, lg, bias_fn=bias_fn, scale=scale, block_size=block)


@functools.lru_cache(maxsize=None)
def reference(T, use_bias):
    inputs, grad_out = make_inputs(T)
    return run(ref_fn(), inputs, grad_out, use_bias)


def assert_match(got, want, **tol):
    out, grads = got
    ref_out, ref_grads = want
    torch.testing.assert_close(out, ref_out, **tol)
    assert set(grads) == set(ref_grads)
    for n in ref_grads:
        assert torch.isfinite(grads[n]).all(), f"non-finite gradient for {n}"
        torch.testing.assert_close(grads[n], ref_grads[n], **tol, msg=lambda m: f"grad {n}: {m}")


# ----------------------------------------------------------------------------------------------
def test_reference_matches_hand_computed_example():
    # T=3, d=1, scale=1: query 2 sees scores [1, -1, 2] -> survivors 0 and 2, Dbar = [2, -, 1]
    q = torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64).view(1, 1, 3, 1)
    k = torch.tensor([1.0, -1.0, 2.0], dtype=torch.float64).view(1, 1, 3, 1)
    v = torch.tensor([10.0, 20.0, 30.0], dtype=torch.float64).view(1, 1, 3, 1)
    lg = torch.full((1, 1, 3), math.log(0.5), dtype=torch.float64)
    l0, l2 = 1 + 2 * math.log(0.5), 2 + 1 * math.log(0.5)
    p0 = math.exp(l0) / (math.exp(l0) + math.exp(l2))
    # row 0: only key 0 (score 1) -> v0; row 1: key 0 (score 1, Dbar 1), key 1 dropped -> v0
    want = torch.tensor([10.0, 10.0, p0 * 10 + (1 - p0) * 30], dtype=torch.float64).view(1, 1, 3, 1)
    for out in (tra_reference(q, k, v, lg, scale=1.0),
                tra_attention_naive(q, k, v, lg, scale=1.0),
                tra_attention_chunked(q, k, v, lg, scale=1.0, block_size=2)):
        torch.testing.assert_close(out, want, atol=1e-12, rtol=0)


@pytest.mark.parametrize("T", [1, 63, 111])
@pytest.mark.parametrize("use_bias", [False, True], ids=["nobias", "bias"])
def test_naive_matches_reference(T, use_bias):
    inputs, grad_out = make_inputs(T)
    assert_match(run(naive_fn(), inputs, grad_out, use_bias), reference(T, use_bias), **F64)


@pytest.mark.parametrize("T", [1, 63, 111])
@pytest.mark.parametrize("block", [1, 7, 16, 37, 512])   # 7 | 63, 37 | 111, 16 divides neither
@pytest.mark.parametrize("use_bias", [False, True], ids=["nobias", "bias"])
def test_chunked_matches_reference(T, block, use_bias):
    inputs, grad_out = make_inputs(T)
    assert_match(run(chunked_fn(block), inputs, grad_out, use_bias), reference(T, use_bias), **F64)


def test_inputs_exercise_the_threshold():
    # guard against a degenerate setup: a good share of causal scores must be dropped and kept
    inputs, _ = make_inputs(63)
    s = inputs["q"] @ inputs["k"].transpose(-1, -2)
    causal = torch.ones(63, 63, dtype=torch.bool).tril()
    frac = (s[..., causal] > 0).double().mean().item()
    assert 0.3 < frac < 0.7


def test_explicit_scale():
    inputs, grad_out = make_inputs(63, seed=1)
    want = run(ref_fn(0.7), inputs, grad_out, True)
    assert_match(run(naive_fn(0.7), inputs, grad_out, True), want, **F64)
    assert_match(run(chunked_fn(10, 0.7), inputs, grad_out, True), want, **F64)


# ---- rows with no surviving key --------------------------------------------------------------
EMPTY_ROWS = [0, 5, 30, 31, 62]


def empty_row_inputs(T=63, all_empty=False):
    inputs, grad_out = make_inputs(T, seed=2)
    # keys with all-positive entries, chosen queries with all-negative ones: every score of those
    # queries is negative, so no key survives there
    inputs["k"] = inputs["k"].abs() + 0.1
    rows = list(range(T)) if all_empty else EMPTY_ROWS
    inputs["q"][:, :, rows] = -(inputs["q"][:, :, rows].abs() + 0.1)
    return inputs, grad_out, rows


@pytest.mark.parametrize("impl", ["naive", "chunked16", "chunked7"])
def test_empty_rows_output_zero_with_zero_finite_grads(impl):
    inputs, grad_out, rows = empty_row_inputs()
    fn = naive_fn() if impl == "naive" else chunked_fn(int(impl[len("chunked"):]))
    out, grads = run(fn, inputs, grad_out, True)
    assert torch.isfinite(out).all()
    assert torch.equal(out[:, :, rows], torch.zeros_like(out[:, :, rows]))
    others = [i for i in range(63) if i not in rows]
    # not a degenerate all-zero output: most other rows do have a survivor
    assert (out[:, :, others].abs().sum(-1) > 0).double().mean() > 0.5
    for n, g in grads.items():
        assert torch.isfinite(g).all(), n
    # nothing flows into an empty row's query, gate or bias
    assert torch.equal(grads["q"][:, :, rows], torch.zeros_like(grads["q"][:, :, rows]))
    assert torch.equal(grads["log_gate"][:, :, rows], torch.zeros_like(grads["log_gate"][:, :, rows]))
    assert torch.equal(grads["bias"][:, rows], torch.zeros_like(grads["bias"][:, rows]))
    assert_match((out, grads), run(ref_fn(), inputs, grad_out, True), **F64)


@pytest.mark.parametrize("impl", ["naive", "chunked"])
def test_all_rows_empty(impl):
    inputs, grad_out, _ = empty_row_inputs(T=20, all_empty=True)
    fn = naive_fn() if impl == "naive" else chunked_fn(8)
    out, grads = run(fn, inputs, grad_out, True)
    assert torch.equal(out, torch.zeros_like(out))
    for n, g in grads.items():
        assert torch.equal(g, torch.zeros_like(g)), n


# ---- float32: blocked vs dense at a longer length --------------------------------------------
def test_chunked_matches_naive_float32_long():
    T = 300
    inputs, grad_out = make_inputs(T, seed=3, dtype=torch.float32, d=8)
    want = run(naive_fn(), inputs, grad_out, True)
    got = run(chunked_fn(64), inputs, grad_out, True)
    assert_match(got, want, atol=2e-5, rtol=1e-4)


def test_tra_qk_norm_scale_option():
    """Learned q/k norm scales start at 1 (same outputs as without them), receive gradients, and
    need qk_norm."""
    from lengen.attention.tra import ThresholdRelativeAttention
    from lengen.posenc import build_posenc

    torch.manual_seed(0)
    a = ThresholdRelativeAttention(d_model=16, n_heads=2)
    torch.manual_seed(0)
    b = ThresholdRelativeAttention(d_model=16, n_heads=2, qk_norm_scale=True)
    pe = build_posenc("nope", d_model=16, n_heads=2, head_dim=8)
    x, pos = torch.randn(2, 9, 16), torch.arange(9.0)
    assert torch.allclose(a(x, pos, pe), b(x, pos, pe))
    b(x, pos, pe).pow(2).sum().backward()
    assert b.q_scale.grad is not None and b.q_scale.grad.abs().sum() > 0
    with pytest.raises(ValueError, match="qk_norm_scale"):
        ThresholdRelativeAttention(d_model=16, n_heads=2, qk_norm=False, qk_norm_scale=True)


@pytest.mark.parametrize("qk_norm", [False, True])
def test_tra_normalises_q_and_k_once_and_only_when_asked(qk_norm):
    """TRA's ``attention_kwargs.qk_norm`` is its own (before RoPE); the model-level q/k norm of
    the Attention base stays off for it, so ``qk_norm=false`` (the equations as printed) leaves
    q and k as projected, and ``true`` normalises them exactly once."""
    from lengen.attention.tra import ThresholdRelativeAttention, rms_normalize

    layer = ThresholdRelativeAttention(d_model=16, n_heads=2, qk_norm=qk_norm)
    g = torch.Generator().manual_seed(0)
    q, k = (3 * torch.randn(2, 2, 5, 8, generator=g) for _ in range(2))
    q1, k1 = layer.prepare_qk(q, k)
    for place in ("before_rope", "after_rope"):
        q1, k1 = layer.norm_qk(q1, k1, place)
    want = (rms_normalize(q), rms_normalize(k)) if qk_norm else (q, k)
    torch.testing.assert_close((q1, k1), want, rtol=0, atol=0)
