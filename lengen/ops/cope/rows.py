"""ctypes bindings of CoPE's per-row C kernels (``cope_rows.c``; built by
:mod:`lengen.ops.ckernels`). :func:`kernels` is None where they cannot be built; the op then runs
its PyTorch code (same values)."""
from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from lengen.ops.ckernels import load_typed
from lengen.ops.cpu_tiles import LOG2E

SOURCE = Path(__file__).with_name("cope_rows.c")
VERSION = 3
_P, _I = ctypes.c_void_p, ctypes.c_int64
_SUFFIX = {torch.float32: "f32", torch.float64: "f64"}


def kernels():
    """The loaded library with typed entry points, or None (no compiler, build failed, or
    ``LENGEN_C_KERNELS=0``)."""
    sig = {}
    for suf in _SUFFIX.values():
        sig[f"cope_rows_fwd_{suf}"] = ([_P, _P, _P, _I, _I, _I, _P, _P, _I, _I, _I,
                                        ctypes.c_double], None)
        # returns 0, or 1: out of memory, nothing done
        sig[f"cope_rows_bwd_{suf}"] = ([_P, _P, _P, _I, _I, _I, _P, _P, _I, _I, _I],
                                       ctypes.c_int64)
    return load_typed(SOURCE, VERSION, sig)


def _rows(t: torch.Tensor):
    """(pointer, batch stride, row stride) of a [G, tq, npos] view with unit last stride."""
    assert t.stride(-1) == 1
    return t.data_ptr(), t.stride(0), t.stride(1)


def forward(lib, S, G, P, z2, b, top: int):
    """S [G, tq, ke] natural scaled scores -> base-2 logits; G: gates -> g (1 - g); P <- clamped
    positions. z2, b: [G, tq, npos] views (z' log2 e and z'[n+1] - z'[n], same strides)."""
    Gn, tq, ke = S.shape
    assert S.is_contiguous() and G.is_contiguous() and P.is_contiguous()
    zp, zg, zr = _rows(z2)
    bp, bg, br = _rows(b)
    assert (zg, zr) == (bg, br)
    getattr(lib, f"cope_rows_fwd_{_SUFFIX[S.dtype]}")(
        S.data_ptr(), G.data_ptr(), P.data_ptr(), Gn * tq, tq, ke, zp, bp, zg, zr, top, LOG2E)


def backward(lib, dL, G, P, b, dz):
    """dL [G, tq, ke] natural logit gradient -> gradient of the scaled score (in place); adds the
    z' gradient of each row into dz ([G, tq, npos] view, same strides as b)."""
    Gn, tq, ke = dL.shape
    assert dL.is_contiguous() and G.is_contiguous() and P.is_contiguous()
    bp, bg, br = _rows(b)
    zp, zg, zr = _rows(dz)
    assert (zg, zr) == (bg, br)
    status = getattr(lib, f"cope_rows_bwd_{_SUFFIX[dL.dtype]}")(
        dL.data_ptr(), G.data_ptr(), P.data_ptr(), Gn * tq, tq, ke, bp, zp, bg, br, b.shape[-1])
    if status:                                   # never a silently wrong gradient
        raise MemoryError(f"cope_rows backward: could not allocate {2 * 4 * (b.shape[-1] + 1)} "
                          f"doubles of scratch (4 rows x 2 x (npos + 1))")
