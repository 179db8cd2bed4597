"""Forgetting attention for CPU training: the tiled softmax op with a per-key bias.

FoT's logits are ``q_i . k_j * scale + c_i - c_j`` (``c = cumsum(log f)``). Along a softmax row
``c_i`` is a constant and drops out, so the op is softmax attention with the per-key bias
``col_j = -c_j`` (plus the positional bias, if any), run by the tiled autograd Function of
:mod:`lengen.ops.softmax.fast_cpu`; the gradient of ``col`` flows back through ``cumsum`` to
``log_f`` by autograd.

Why not one fused SDPA call? The decay does fit a dot product (``q' = [q, c_i/scale, 1/scale]``,
``k' = [k, 1, -c_j]``), and PyTorch's CPU flash kernel then runs forward and backward in O(T)
memory. But once the forget gates have decayed distant keys, ``exp`` of their logits lands in
denormal numbers, which CPUs process far more slowly (measured in benchmarks/RESULTS.md, "CPU
primitives"), and the flash backward loses its speed. The tiled op clamps shifted logits above the
denormal range first (:func:`lengen.ops.cpu_tiles.exp_floor`).
"""
from __future__ import annotations

import torch

from lengen.ops.fot.naive import fot_attention_naive
from lengen.ops.softmax.fast_cpu import softmax_attention_fast_cpu


def fot_attention_fast_cpu(q, k, v, log_f, *, bias_fn=None, scale=None, return_weights=False,
                           rows=None, **tile_kw):
    """Drop-in for ``fot_attention_naive`` (q, k, v: [B, H, T, hd]; log_f: [B, H, T]).
    ``tile_kw``: ``budget`` / ``qblock``, and ``rows``, of :func:`softmax_attention_fast_cpu`."""
    if return_weights or q.dtype not in (torch.float32, torch.float64):
        return fot_attention_naive(q, k, v, log_f, bias_fn=bias_fn, scale=scale,
                                   return_weights=return_weights)
    c = log_f.to(torch.promote_types(log_f.dtype, torch.float32)).cumsum(-1)   # [B, H, T]
    return softmax_attention_fast_cpu(q, k, v, causal=True, bias_fn=bias_fn, scale=scale,
                                      col_bias=-c.to(q.dtype), rows=rows, **tile_kw)
