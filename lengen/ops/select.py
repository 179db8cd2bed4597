"""An attention kind's ops, declared once (:class:`Ops`), and the device rules that choose the
training op for ``impl='auto'`` (:meth:`Ops.training`).

CPU tensors: the tiled ``fast_cpu`` op. CUDA tensors: the fused Triton kernel when triton is
installed, no positional bias is needed (the kernels take no ``bias_fn``) and the head dim is at
most 128; otherwise the dense reference. Positions never reach the kernels: they take no bias,
and RoPE rotates q and k before any op runs, so shared ``[T]`` and per-sequence ``[B, T]``
positions need nothing from them (tests/test_batched_positions.py runs them under the
interpreter). Every op chosen here is tested equal to the reference (tests/test_fast_cpu.py,
tests/test_triton_kernels.py).

How :meth:`lengen.attention.base.Attention.attend` uses the ops: recording weights -> ``naive``
(``return_weights=True``); ``impl='naive'`` -> ``naive``; ``impl='lean'`` or evaluation ->
``lean``; training with ``impl='auto'`` -> the kind's ``training_op``, by default
:meth:`Ops.training`.
"""
from __future__ import annotations

import functools
import importlib
import importlib.util

import torch
from dataclasses import dataclass
from typing import Callable


@functools.cache
def triton_available() -> bool:
    """Whether triton is installed (asked once per process: training asks at every layer)."""
    return importlib.util.find_spec("triton") is not None


def with_rows(op, rows=None):
    """``op`` with ``rows`` (bool [B, T], the query rows whose outputs are read) bound, for the
    CPU ops that may skip the others; ``op`` itself without it."""
    return op if rows is None else functools.partial(op, rows=rows)


def cpu_training_op(op, q, rows=None):
    """The tiled CPU training op ``op`` (``rows`` bound, :func:`with_rows`) when q is on the CPU
    and ``torch.compile`` (``train.compile``) is not tracing; None otherwise, or when ``op`` is
    None. Under the compiler the CPU op is left out: its tiles keep Python caches keyed by
    tensor identity, which would recompile the graph at every step; the dense reference is what
    the compiler fuses."""
    if op is not None and q.device.type == "cpu" and not torch.compiler.is_compiling():
        return with_rows(op, rows)
    return None


@dataclass(frozen=True)
class Ops:
    """One attention kind's functional ops (``lengen/ops/<op>/``), each called as ``op(q, k, v,
    *extra, bias_fn=..., **keywords)`` with the kind's own inputs (``Attention.op_args``).

    ``naive``: the dense reference from the equations (takes ``return_weights=True``).
    ``lean``: query-blocked, memory linear in T (takes ``block_size=`` and, for cached decoding,
    ``q_offset=``). ``fast_cpu``: CPU training (takes ``rows=``); None: the reference trains on
    the CPU. ``triton``: ``(module, function)`` of a fused CUDA kernel without a bias, imported
    only when chosen; None: the reference trains on CUDA."""

    naive: Callable
    lean: Callable
    fast_cpu: Callable | None = None
    triton: tuple[str, str] | None = None

    def training(self, q, bias_fn=None, rows=None):
        """The op ``impl='auto'`` trains with for q's device; ``rows`` (bool [B, T], the query
        rows whose outputs are read) goes to the CPU op, which may skip the others (the other
        ops compute every row). Under ``torch.compile`` the CPU op is left out
        (:func:`cpu_training_op`)."""
        if (op := cpu_training_op(self.fast_cpu, q, rows)) is not None:
            return op
        if (self.triton is not None and q.device.type == "cuda" and bias_fn is None
                and q.shape[-1] <= 128 and triton_available()):
            module, name = self.triton
            return getattr(importlib.import_module(module), name)
        return self.naive


__all__ = ["Ops", "cpu_training_op", "triton_available", "with_rows"]
