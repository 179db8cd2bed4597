"""Device-based choice of the training op for ``impl='auto'``.

CPU tensors: the tiled ``fast_cpu`` op. CUDA tensors: the fused Triton kernel when triton is
installed, no positional bias is needed (the kernels take no ``bias_fn``) and the head dim is at
most 128; otherwise the dense reference. Positions never reach the kernels: they take no bias,
and RoPE rotates q and k before any op runs, so shared ``[T]`` and per-sequence ``[B, T]``
positions need nothing from them (tests/test_batched_positions.py runs them under the
interpreter). Every op chosen here is tested equal to the reference (tests/test_fast_cpu.py,
tests/test_triton_kernels.py).
"""
from __future__ import annotations

import functools
import importlib
import importlib.util


def triton_available() -> bool:
    return importlib.util.find_spec("triton") is not None


def with_rows(op, rows=None):
    """``op`` with ``rows`` (bool [B, T], the query rows whose outputs are read) bound, for the
    CPU ops that may skip the others; ``op`` itself without it."""
    return op if rows is None else functools.partial(op, rows=rows)


def pick(q, bias_fn, *, fast_cpu, naive, triton_module: str, triton_name: str, rows=None):
    """The op; ``rows`` (bool [B, T], the query rows whose outputs are read) goes to the CPU op,
    which may skip the others (the other ops compute every row)."""
    if q.device.type == "cpu":
        return with_rows(fast_cpu, rows)
    if q.device.type == "cuda" and bias_fn is None and q.shape[-1] <= 128 and triton_available():
        return getattr(importlib.import_module(triton_module), triton_name)
    return naive
