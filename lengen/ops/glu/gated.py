"""SwiGLU's activation ``silu(g) * u`` (Shazeer 2020, "GLU Variants Improve Transformer"), with a
CPU training path in C (``glu_rows.c``, built by :mod:`lengen.ops.ckernels`).

Why: PyTorch runs the product as silu then mul, and its backward as two muls and silu_backward,
each a pass over the [tokens, d_ff] tensors; the kernel does one pass forward and one backward
(the equations are in the C file's header), and keeps g and u for backward as PyTorch keeps
silu(g) and u.

:func:`swiglu` takes the kernel for float32 CPU tensors of one shape when a gradient is needed
and the kernel is available (``LENGEN_C_KERNELS=0``, no C compiler, or ``torch.compile`` turn
it off); otherwise, evaluation included, it is ``F.silu(g) * u`` itself, so evaluated numbers do
not change. The two agree to fp32 rounding (tests/test_swiglu.py: values and gradients against
PyTorch and a float64 reference).
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import torch
import torch.nn.functional as F

from lengen.ops.ckernels import enabled, load_typed, refuse_double_backward
from lengen.ops.cpu_workspace import index_chunks, run_groups

SOURCE = Path(__file__).with_name("glu_rows.c")
VERSION = 2
_P, _I = ctypes.c_void_p, ctypes.c_int64


def kernels():
    """The loaded library with typed entry points, or None (no compiler, failed build, or
    ``LENGEN_C_KERNELS=0``, read at every call)."""
    if not enabled():
        return None
    return load_typed(SOURCE, VERSION, {
        "swiglu_fwd": ([_I, _I, _P, _P, _P], None),
        "swiglu_bwd": ([_I, _I, _P, _P, _P, _P, _P], None),
        "glu_rows_force_baseline": ([_I], None)})


def applies(g: torch.Tensor, u: torch.Tensor) -> bool:
    """Whether :func:`swiglu` takes the C kernel for these inputs."""
    grad = torch.is_grad_enabled() and (g.requires_grad or u.requires_grad)
    return (grad and not torch.compiler.is_compiling() and g.shape == u.shape
            and g.device.type == u.device.type == "cpu"
            and g.dtype == u.dtype == torch.float32 and g.numel() > 0 and kernels() is not None)


class _SwiGLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, g, u):
        gc, uc = g.contiguous(), u.contiguous()
        h = torch.empty_like(gc)
        lib = kernels()
        chunks = index_chunks(gc.numel())
        run_groups(lambda ci: lib.swiglu_fwd(*chunks[ci], gc.data_ptr(), uc.data_ptr(),
                                             h.data_ptr()), len(chunks))
        ctx.save_for_backward(gc, uc)
        return h

    @staticmethod
    def backward(ctx, dh):
        refuse_double_backward("the C SwiGLU")
        gc, uc = ctx.saved_tensors
        dh = dh.to(torch.float32).contiguous()
        dg, du = torch.empty_like(gc), torch.empty_like(uc)
        lib = kernels()
        chunks = index_chunks(gc.numel())
        run_groups(lambda ci: lib.swiglu_bwd(*chunks[ci], gc.data_ptr(), uc.data_ptr(),
                                             dh.data_ptr(), dg.data_ptr(), du.data_ptr()),
                   len(chunks))
        return dg, du


def swiglu(g: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """``F.silu(g) * u``, through the C kernel where :func:`applies`."""
    if applies(g, u):
        return _SwiGLU.apply(g, u)
    return F.silu(g) * u
