"""Differential attention through the softmax op's lean path.

``(A1 - lambda A2) v = A1 v - lambda A2 v``: each half is an ordinary softmax attention over the
shared value, so both run through :func:`softmax_attention_chunked` (fused SDPA without a bias,
query blocks of [.., block, T] with one) and are combined afterwards. Peak memory is linear in T.
"""
from __future__ import annotations

from lengen.ops.diff.naive import check_shapes, combine_halves
from lengen.ops.softmax import softmax_attention_chunked


def diff_attention_chunked(q, k, v, lam, *, causal=True, bias_fn=None, scale=None, block_size=256,
                           q_offset=0):
    """``q_offset``: the query rows are the last keys (cached decoding), as in
    :func:`softmax_attention_chunked`."""
    check_shapes(q, v)
    v2 = v.repeat_interleave(2, dim=1)                           # [B, 2H, T, 2hd]: same v per half
    out = softmax_attention_chunked(q, k, v2, causal=causal, bias_fn=bias_fn, scale=scale,
                                    block_size=block_size, q_offset=q_offset)  # [B, 2H, T, 2hd]
    return combine_halves(out, lam)                              # [B, H, T, 2hd]
