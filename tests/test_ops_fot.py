"""FoT ops (dense reference and SDPA over query blocks) against the loop-over-positions reference.

float64 except the last test; outputs and gradients w.r.t. q, k, v, log_f and a learnable bias
passed through ``bias_fn``; odd lengths and block sizes that do and do not divide T.
"""
from __future__ import annotations

import functools
import math

import pytest
import torch
import torch.nn.functional as F
from reference_loops import fot_reference

from lengen.ops.fot import fot_attention_chunked, fot_attention_naive

F64 = dict(atol=1e-10, rtol=1e-8)     # float64: reference and ops agree to rounding
NAMES = ("q", "k", "v", "log_f", "bias")
B, H, D = 2, 2, 4


def make_inputs(T, seed=0, dtype=torch.float64, d=D):
    g = torch.Generator().manual_seed(1000 * seed + T)
    q = torch.randn(B, H, T, d, generator=g, dtype=dtype)
    k = torch.randn(B, H, T, d, generator=g, dtype=dtype)
    v = torch.randn(B, H, T, d, generator=g, dtype=dtype)
    # gates spread over (0, 1): some keys decay fast, some barely
    log_f = F.logsigmoid(2 * torch.randn(B, H, T, generator=g, dtype=dtype) + 1)
    bias = 0.5 * torch.randn(H, T, T, generator=g, dtype=dtype)
    grad_out = torch.randn(B, H, T, d, generator=g, dtype=dtype)
    return dict(q=q, k=k, v=v, log_f=log_f, bias=bias), grad_out


def run(fn, inputs, grad_out, use_bias):
    x = {n: t.clone().requires_grad_(True) for n, t in inputs.items()}
    bias_fn = (lambda s, e: x["bias"][:, s:e]) if use_bias else None     # [H, e-s, T]
    out = fn(x["q"], x["k"], x["v"], x["log_f"], x["bias"] if use_bias else None, bias_fn)
    (out * grad_out).sum().backward()
    names = NAMES if use_bias else NAMES[:-1]
    # an input the output does not depend on (log_f at T=1 in the loop reference) has no grad
    return out.detach(), {n: torch.zeros_like(x[n]) if x[n].grad is None else x[n].grad
                          for n in names}


def ref_fn(scale=None):
    return lambda q, k, v, lf, bias, bias_fn: fot_reference(q, k, v, lf, bias=bias, scale=scale)


def naive_fn(scale=None):
    return lambda q, k, v, lf, bias, bias_fn: fot_attention_naive(q, k, v, lf, bias_fn=bias_fn,
                                                                  scale=scale)


def chunked_fn(block, scale=None):
    return lambda q, k, v, lf, bias, bias_fn: fot_attention_chunked(
        q, k, v, lf, bias_fn=bias_fn, scale=scale, block_size=block)


@functools.lru_cache(maxsize=None)
def reference(T, use_bias):
    inputs, grad_out = make_inputs(T)
    return run(ref_fn(), inputs, grad_out, use_bias)


def assert_match(got, want, **tol):
    out, grads = got
    ref_out, ref_grads = want
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, ref_out, **tol)
    assert set(grads) == set(ref_grads)
    for n in ref_grads:
        assert torch.isfinite(grads[n]).all(), f"non-finite gradient for {n}"
        torch.testing.assert_close(grads[n], ref_grads[n], **tol, msg=lambda m: f"grad {n}: {m}")


# ----------------------------------------------------------------------------------------------
def test_reference_matches_hand_computed_example():
    # T=3, d=1, scale=1, q=k=0: logits of query 2 are [log f1 + log f2, log f2, 0]
    z = torch.zeros(1, 1, 3, 1, dtype=torch.float64)
    v = torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64).view(1, 1, 3, 1)
    f = [0.9, 0.5, 0.25]
    lf = torch.tensor(f, dtype=torch.float64).log().view(1, 1, 3)
    w2 = torch.tensor([f[1] * f[2], f[2], 1.0], dtype=torch.float64)
    w2 = w2 / w2.sum()
    w1 = torch.tensor([f[1], 1.0], dtype=torch.float64)
    w1 = w1 / w1.sum()
    want = torch.tensor([1.0, w1[0] * 1 + w1[1] * 2, w2 @ v.view(3)], dtype=torch.float64)
    for out in (fot_reference(z, z, v, lf, scale=1.0), fot_attention_naive(z, z, v, lf, scale=1.0),
                fot_attention_chunked(z, z, v, lf, scale=1.0, block_size=2)):
        torch.testing.assert_close(out.view(3), want, atol=1e-12, rtol=0)
    assert not math.isclose(float(want[2]), float(v.mean()))   # the decay matters here


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


def test_explicit_scale():
    inputs, grad_out = make_inputs(63, seed=1)
    want = run(ref_fn(0.7), inputs, grad_out, True)
    assert_match(run(naive_fn(0.7), inputs, grad_out, True), want, **F64)
    assert_match(run(chunked_fn(10, 0.7), inputs, grad_out, True), want, **F64)


def test_strong_forgetting_is_finite():
    # log f = -50 per step: decays of thousands in the logits, still no NaN/inf and the output is
    # (nearly) the query's own value
    inputs, grad_out = make_inputs(63, seed=4)
    inputs["log_f"] = torch.full_like(inputs["log_f"], -50.0)
    for fn in (naive_fn(), chunked_fn(16)):
        out, grads = run(fn, inputs, grad_out, False)
        assert torch.isfinite(out).all()
        assert all(torch.isfinite(g).all() for g in grads.values())
        torch.testing.assert_close(out, inputs["v"], atol=1e-12, rtol=0)


# ---- float32: blocked vs dense at a longer length --------------------------------------------
def test_chunked_matches_naive_float32_long():
    T = 300
    inputs, grad_out = make_inputs(T, seed=3, dtype=torch.float32, d=8)
    want = run(naive_fn(), inputs, grad_out, True)
    got = run(chunked_fn(64), inputs, grad_out, True)
    assert_match(got, want, atol=2e-5, rtol=1e-4)
