"""Fused Triton TRA and FoT kernels against their dense references: outputs and every gradient.

Runs on CPU through Triton's interpreter (``TRITON_INTERPRET=1`` is set here before triton is
imported, unless the caller set it). With ``TRITON_INTERPRET=0`` on a CUDA machine the same
tests run the compiled kernels on the GPU.

The reference is the naive op in float64 on the *same* input values (bf16 inputs are upcast), so
each tolerance measures the kernel's own rounding:
  * fp32 inputs: |kernel - ref| <= 2e-5 + 1e-4 * |ref| elementwise (observed errors ~1e-6).
  * bf16 inputs: relative RMSE ||kernel - ref|| / ||ref|| <= 2e-2 per tensor (observed 3.7e-3
    for the output, up to 1e-2 for dq and dlog_gate). bf16 keeps 8 significant bits; P and dS
    are rounded to bf16 before the P @ V and dS @ K products (as in FlashAttention-2), and
    delta_i = rowsum(dO * O) uses the bf16 output, which dominates the gate-gradient error.
    The upstream gradient is rounded to bf16 for the reference too (same values both sides).
Shapes are tiny (B=1, H=2) with 16-wide tiles so that T = 17..111 spans several key blocks: the
TRA carry of surviving-key counts across blocks and the causal mask on the diagonal tile only
are both exercised.
"""
from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

pytest.importorskip("triton")

from lengen.ops.fot.naive import fot_attention_naive  # noqa: E402
from lengen.ops.fot.triton import fot_attention_triton  # noqa: E402
from lengen.ops.tra.naive import tra_attention_naive  # noqa: E402
from lengen.ops.tra.triton import tra_attention_triton  # noqa: E402

DEVICE = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
# a device condition only: by default this module turns the interpreter on (above), so the
# kernels always run on CPU; only TRITON_INTERPRET=0 forced on a machine without CUDA skips
pytestmark = pytest.mark.skipif(DEVICE == "cuda" and not torch.cuda.is_available(),
                                reason="TRITON_INTERPRET is off and no CUDA device is present")

B, H = 1, 2
FP32_TOL = dict(atol=2e-5, rtol=1e-4)
BF16_REL_RMSE = 2e-2

# (T, head dim, tile edge): T = 1 (a single, partly padded tile), odd T, several key blocks,
# head dims 16 and 32, and 20 (not a power of two: the kernels mask the padded columns)
SHAPES = [(1, 16, 16), (17, 32, 16), (63, 16, 16), (111, 32, 16), (40, 20, 16)]


def _inputs(gen, T, hd, dtype, gate_scale=2.0):
    """q, k, v built as [B, T, H, hd] and transposed (non-contiguous, as the attention module
    passes them) plus a log-sigmoid gate [B, H, T]."""
    q, k, v = (torch.randn(B, T, H, hd, generator=gen).transpose(1, 2) for _ in range(3))
    gate = F.logsigmoid(gate_scale * torch.randn(B, H, T, generator=gen))
    return [t.to(dtype) for t in (q, k, v)] + [gate.to(dtype)]


def _run(fn, inputs, do, **kw):
    """Output and gradients of every input, with the inputs turned into leaves."""
    leaves = [t.detach().clone().to(DEVICE).requires_grad_() for t in inputs]
    out = fn(*leaves, **kw)
    grads = torch.autograd.grad(out, leaves, do.to(device=DEVICE, dtype=out.dtype))
    return [out.detach().cpu()] + [g.cpu() for g in grads]


def _reference(naive, inputs, do):
    return _run_on_cpu(naive, [t.double() for t in inputs], do.double())


def _run_on_cpu(fn, inputs, do):
    leaves = [t.detach().clone().requires_grad_() for t in inputs]
    out = fn(*leaves)
    return [out.detach()] + list(torch.autograd.grad(out, leaves, do))


NAMES = ["out", "dq", "dk", "dv", "dgate"]


def _assert_fp32_close(got, ref):
    for name, g, r in zip(NAMES, got, ref):
        assert g.dtype == torch.float32, name
        torch.testing.assert_close(g.double(), r, **FP32_TOL, msg=lambda m: f"{name}: {m}")


def _assert_bf16_close(got, ref):
    for name, g, r in zip(NAMES, got, ref):
        assert g.dtype == torch.bfloat16, name
        assert torch.isfinite(g).all(), name
        err = (g.double() - r).norm() / r.norm().clamp_min(1e-12)
        assert err <= BF16_REL_RMSE, f"{name}: relative RMSE {err:.2e} > {BF16_REL_RMSE}"


# -------------------------------------------------------------------------------------------
# TRA
# -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("T,hd,block", SHAPES)
def test_tra_fp32_matches_reference(gen, T, hd, block):
    inputs = _inputs(gen, T, hd, torch.float32)
    do = torch.randn(B, H, T, hd, generator=gen)
    got = _run(tra_attention_triton, inputs, do, block_size=block)
    _assert_fp32_close(got, _reference(tra_attention_naive, inputs, do))


@pytest.mark.parametrize("T,hd,block", [(63, 32, 16), (111, 16, 32)])
def test_tra_bf16_matches_reference(gen, T, hd, block):
    inputs = _inputs(gen, T, hd, torch.bfloat16)
    do = torch.randn(B, H, T, hd, generator=gen).bfloat16()
    got = _run(tra_attention_triton, inputs, do, block_size=block)
    _assert_bf16_close(got, _reference(tra_attention_naive, inputs, do))


def test_tra_empty_rows_give_zero_output_and_gradient(gen):
    T, hd = 40, 16
    q, k, v, gate = _inputs(gen, T, hd, torch.float32)
    q, k = q.contiguous(), k.abs().contiguous()     # all keys in the positive orthant
    empty = [0, 7, 16, 33]                           # across three 16-row tiles
    q[:, 0, 0] = -q[:, 0, 0].abs()                   # head 0, row 0: its only key scores < 0
    q[:, 0, 7] = 0.0                                 # S == 0 does not survive (strict >)
    q[:, 0, 16] = -q[:, 0, 16].abs()                 # every key scores < 0
    q[:, 0, 33] = -q[:, 0, 33].abs()
    # head 1, row 35: a single survivor, far left in another key block (carry of zero counts)
    q[:, 1, 35] = -k[:, 1, 2]
    k[:, 1, 2] = -k[:, 1, 2]                         # only key 2 now scores > 0 for row 35
    do = torch.randn(B, H, T, hd, generator=gen)
    inputs = [q, k, v, gate]
    got = _run(tra_attention_triton, inputs, do, block_size=16)
    out, dq, _, _, dgate = got
    assert (out[:, 0, empty] == 0).all()
    assert (dq[:, 0, empty] == 0).all() and (dgate[:, 0, empty] == 0).all()
    # the single-survivor row copies that key's value exactly
    torch.testing.assert_close(out[:, 1, 35], v[:, 1, 2], **FP32_TOL)
    _assert_fp32_close(got, _reference(tra_attention_naive, inputs, do))


def test_tra_strong_gate_uses_contextual_distance(gen):
    """A gate near log(0) makes the weights depend almost only on the survivor count, so a wrong
    count (e.g. a dropped carry between key blocks) changes the output a lot."""
    T, hd = 50, 16
    inputs = _inputs(gen, T, hd, torch.float32)
    inputs[3] = torch.full((B, H, T), -3.0)
    do = torch.randn(B, H, T, hd, generator=gen)
    got = _run(tra_attention_triton, inputs, do)        # default tile edge (32 on CPU)
    _assert_fp32_close(got, _reference(tra_attention_naive, inputs, do))


# -------------------------------------------------------------------------------------------
# FoT
# -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("T,hd,block", SHAPES)
def test_fot_fp32_matches_reference(gen, T, hd, block):
    inputs = _inputs(gen, T, hd, torch.float32)
    do = torch.randn(B, H, T, hd, generator=gen)
    got = _run(fot_attention_triton, inputs, do, block_size=block)
    _assert_fp32_close(got, _reference(fot_attention_naive, inputs, do))


@pytest.mark.parametrize("T,hd,block", [(63, 32, 16), (111, 16, 32)])
def test_fot_bf16_matches_reference(gen, T, hd, block):
    inputs = _inputs(gen, T, hd, torch.bfloat16)
    do = torch.randn(B, H, T, hd, generator=gen).bfloat16()
    got = _run(fot_attention_triton, inputs, do, block_size=block)
    _assert_bf16_close(got, _reference(fot_attention_naive, inputs, do))


def test_fot_custom_scale_and_strong_forgetting(gen):
    T, hd = 45, 16
    inputs = _inputs(gen, T, hd, torch.float32, gate_scale=6.0)   # gates from ~0 to ~1
    do = torch.randn(B, H, T, hd, generator=gen)
    got = _run(fot_attention_triton, inputs, do, scale=0.3, block_size=16)
    ref = _run_on_cpu(lambda *a: fot_attention_naive(*a, scale=0.3),
                      [t.double() for t in inputs], do.double())
    _assert_fp32_close(got, ref)


# -------------------------------------------------------------------------------------------
# argument checks (callers rely on these to fall back to other paths)
# -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fn", [tra_attention_triton, fot_attention_triton])
def test_unsupported_arguments_raise(gen, fn):
    q, k, v, gate = (t.to(DEVICE) for t in _inputs(gen, 4, 16, torch.float32))
    with pytest.raises(NotImplementedError, match="bias_fn"):
        fn(q, k, v, gate, bias_fn=lambda s, e: 0.0)
    big = torch.zeros(B, H, 4, 256, device=DEVICE)
    with pytest.raises(ValueError, match="head dim"):
        fn(big, big, big, gate)
    with pytest.raises(TypeError, match="float16/bfloat16/float32"):
        fn(q.double(), k.double(), v.double(), gate)
    with pytest.raises(ValueError, match=r"\[B, H, T\]"):
        fn(q, k, v, gate[..., :-1])
