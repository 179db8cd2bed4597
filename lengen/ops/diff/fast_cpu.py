"""Differential attention for training: the per-row C kernel on CPU, fused SDPA elsewhere without
a bias.

``(A1 - lambda A2) v = A1 v - lambda A2 v``: each half is an ordinary softmax attention over the
shared value of width 2*hd, so both halves run as 2H ordinary heads and are combined afterwards
(:func:`lengen.ops.diff.naive.combine_halves`; ``lambda`` keeps its gradient).

* **CPU, float32, causal** (with or without a bias): the C kernel of
  :mod:`lengen.ops.fused_rows` through :func:`lengen.ops.softmax.fast_cpu.softmax_attention_fast_cpu`
  over the 2H heads; the kernel takes a value wider than q and k, and the rows the caller does
  not read (``rows``) are skipped. Where the kernel does not apply, the tiled softmax op with a
  bias, SDPA without.
* **No bias** elsewhere: one ``F.scaled_dot_product_attention`` call. Its fused CPU kernel
  (flash, with a backward) needs the value as wide as the query, otherwise SDPA takes its unfused
  math path (slower; measured in benchmarks/RESULTS.md, "CPU primitives"). So q and k are
  zero-padded from hd to 2*hd (the extra columns add exactly 0 to every dot product; ``scale``
  stays hd**-0.5 by default) and the value is repeated per half: [B, 2H, T, 2hd] everywhere.
* **With a bias** off the CPU: one SDPA call with the full [.., 2H, T, T] bias as its mask
  (gradient to the bias via SDPA).

Same signature and maths as :func:`lengen.ops.diff.naive.diff_attention_naive`; tested equal to it
(values and all gradients, tests/test_fast_cpu_diff_cope.py).
"""
from __future__ import annotations

import torch.nn.functional as F

from lengen.ops.diff.naive import check_shapes, combine_halves, diff_attention_naive
from lengen.ops.fused_rows import fused_applies
from lengen.ops.softmax import softmax_attention_chunked
from lengen.ops.softmax.fast_cpu import softmax_attention_fast_cpu


def diff_attention_fast_cpu(q, k, v, lam, *, causal=True, bias_fn=None, scale=None,
                            return_weights=False, rows=None):
    """q, k: [B, 2H, T, hd]; v: [B, H, T, 2hd]; lam: scalar or [H] tensor -> [B, H, T, 2hd].
    ``rows`` (bool [B, T]): the query rows whose outputs are read; the C kernel skips the others
    (they come out 0), the other paths compute them all."""
    if return_weights:
        return diff_attention_naive(q, k, v, lam, causal=causal, bias_fn=bias_fn, scale=scale,
                                    return_weights=True)
    check_shapes(q, v)
    hd = q.shape[-1]
    scale = hd ** -0.5 if scale is None else scale
    if causal and q.shape[-2] != k.shape[-2]:
        raise ValueError("causal fast diff attention needs as many keys as queries")
    v2 = v.repeat_interleave(2, dim=1)                           # [B, 2H, T, 2hd]: v per half
    if q.device.type == "cpu" and (bias_fn is not None
                                   or fused_applies(q, k, v2, scale, None, None, causal)):
        # the C kernel when it applies (a bias it cannot take goes to the tiled op inside)
        out = softmax_attention_fast_cpu(q, k, v2, causal=causal, bias_fn=bias_fn, scale=scale,
                                         rows=rows)
    elif bias_fn is None:
        out = F.scaled_dot_product_attention(F.pad(q, (0, hd)), F.pad(k, (0, hd)), v2,
                                             is_causal=causal, scale=scale)
    else:
        out = softmax_attention_chunked(q, k, v2, causal=causal, bias_fn=bias_fn, scale=scale,
                                        block_size=q.shape[-2])
    return combine_halves(out, lam)                              # [B, H, T, 2hd]
