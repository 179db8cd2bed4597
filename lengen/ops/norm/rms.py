"""RMSNorm (Zhang & Sennrich 2019), ``y = x / sqrt(mean(x^2) + eps) * w`` over the last dim,
with a CPU training path in C (``rms_rows.c``, built by :mod:`lengen.ops.ckernels`).

Why: ``torch.nn.functional.rms_norm`` has a fused forward on CPU, but its backward runs as five
or six passes over the whole tensor (pow, mean, rsqrt, mul ...); in the cpu-scale models
(d_model 64, a few thousand tokens per step) the norms' backward took longer than their
matmuls' (benchmarks/RESULTS.md, "RMSNorm"; ``benchmarks/ops.py --ops rms_norm``). The kernel
does a row's backward in one pass and keeps one float per row (1 / rms) from its forward.

:func:`rms_norm` takes the kernel for float32 CPU tensors when a gradient is needed and the
kernel is available (``LENGEN_C_KERNELS=0``, no C compiler, or ``torch.compile`` turn it off);
otherwise, evaluation included, it is ``F.rms_norm`` itself, so evaluated numbers do not
change. The two agree to fp32 rounding (tests/test_rms_norm.py: values and gradients, against
F.rms_norm and a float64 reference).
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import torch
import torch.nn.functional as F

from lengen.ops.ckernels import enabled, load_typed, refuse_double_backward
from lengen.ops.cpu_workspace import index_chunks, run_groups, sum_parts

SOURCE = Path(__file__).with_name("rms_rows.c")
VERSION = 1
_P, _I, _D = ctypes.c_void_p, ctypes.c_int64, ctypes.c_double


def kernels():
    """The loaded library with typed entry points, or None (no compiler, failed build, or
    ``LENGEN_C_KERNELS=0``, read at every call)."""
    if not enabled():
        return None
    return load_typed(SOURCE, VERSION, {
        "rms_rows_fwd": ([_I, _I, _I, _P, _P, _D, _P, _P], None),
        "rms_rows_bwd": ([_I, _I, _I, _P, _P, _P, _P, _P, _P], None)})


def applies(x: torch.Tensor, weight: torch.Tensor | None) -> bool:
    """Whether :func:`rms_norm` takes the C kernel for these inputs."""
    grad = torch.is_grad_enabled() and (x.requires_grad or (weight is not None
                                                            and weight.requires_grad))
    return (grad and not torch.compiler.is_compiling() and x.device.type == "cpu"
            and x.dtype == torch.float32 and x.dim() >= 1 and x.shape[-1] > 0 and x.numel() > 0
            and (weight is None or (weight.dtype == torch.float32 and weight.dim() == 1
                                    and weight.shape[0] == x.shape[-1]
                                    and weight.device.type == "cpu"))
            and kernels() is not None)



class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        d = x.shape[-1]
        xc = x.contiguous()
        wc = None if weight is None else weight.contiguous()
        rows = xc.numel() // d
        y = torch.empty_like(xc)
        rstd = torch.empty(rows, dtype=torch.float32)
        lib = kernels()
        chunks = index_chunks(rows)
        run_groups(lambda ci: lib.rms_rows_fwd(*chunks[ci], d, xc.data_ptr(),
                                               None if wc is None else wc.data_ptr(), eps,
                                               y.data_ptr(), rstd.data_ptr()), len(chunks))
        ctx.save_for_backward(xc, wc, rstd)
        return y

    @staticmethod
    def backward(ctx, dy):
        refuse_double_backward("the C RMSNorm")
        xc, wc, rstd = ctx.saved_tensors
        d = xc.shape[-1]
        rows = xc.numel() // d
        dy = dy.to(torch.float32).contiguous()
        dx = torch.empty_like(xc)
        chunks = index_chunks(rows)
        need_w = wc is not None and ctx.needs_input_grad[1]
        # the weight's gradient sums over rows: one accumulator per chunk, summed after
        dws = [torch.zeros(d) if need_w else None for _ in chunks]
        lib = kernels()
        run_groups(lambda ci: lib.rms_rows_bwd(*chunks[ci], d, xc.data_ptr(),
                                               None if wc is None else wc.data_ptr(),
                                               rstd.data_ptr(), dy.data_ptr(), dx.data_ptr(),
                                               None if dws[ci] is None else dws[ci].data_ptr()),
                   len(chunks))
        return dx, sum_parts(dws), None


def qk_rms(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x [.., hd] -> x * rsqrt(mean(x^2, -1) + eps), no weight, computed in float32 or wider:
    the model-level q/k norm (``model.qk_norm``, :meth:`lengen.attention.base.Attention.norm_qk`;
    eps = the blocks' RMSNorm eps, Llama 4 uses its rms_norm_eps for both). Plain torch on every
    device, never the C kernel: on CPU it equals ``F.rms_norm`` bit for bit (values and
    gradients), and the q/k norm stays equal to Llama 4's ``Llama4TextL2Norm``."""
    xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None = None, eps: float = 1e-6):
    """RMSNorm over the last dim of x, times ``weight`` [d] if given: ``F.rms_norm(x,
    (d,), weight, eps)``, through the C kernel where :func:`applies`."""
    if applies(x, weight):
        return _RMSNorm.apply(x, weight, float(eps))
    return F.rms_norm(x, (x.shape[-1],), weight, eps)
