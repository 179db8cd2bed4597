"""Forgetting attention through SDPA over query blocks: the decay bias c_i - c_j of a block is
[B, H, block, T] at most, so peak memory grows linearly in T (default at evaluation).

bf16/fp16 inputs: SDPA wants its additive mask in the input dtype, and ``c_i - c_j`` rounded to
bf16 is off by up to a unit at T ~ 2000 (see :mod:`lengen.ops.fot.naive`), so half-precision
blocks compute their logits and softmax in fp32 instead of calling SDPA.

:func:`fot_attention_blocks` takes the cumulative log-forget ``c`` of every key directly, so a
cached decoding step (``q_offset``: the query rows are the last ``Tq`` keys) can pass the ``c``
carried in its cache and each new row gets ``c_i - c_j`` against every cached key exactly.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from lengen.ops.common import causal_mask, query_blocks


def cumulative_log_forget(log_f: torch.Tensor,
                          c_before: torch.Tensor | None = None) -> torch.Tensor:
    """c = cumsum(log_f) in at least fp32 (fp64 inputs stay fp64), continuing from the last entry
    of ``c_before`` ([B, H, Tc], cached keys) when given. log_f: [B, H, T] -> [B, H, T]."""
    c = log_f.to(torch.promote_types(log_f.dtype, torch.float32)).cumsum(-1)
    if c_before is not None and c_before.shape[-1]:
        c = c + c_before[..., -1:].to(c.dtype)
    return c


def fot_attention_chunked(q, k, v, log_f, *, bias_fn=None, scale=None, block_size=256):
    c = cumulative_log_forget(log_f)                   # [B, H, T], fp32 at least, never half
    return fot_attention_blocks(q, k, v, c, bias_fn=bias_fn, scale=scale, block_size=block_size)


def fot_attention_blocks(q, k, v, c, *, bias_fn=None, scale=None, block_size=256, q_offset=0):
    """q: [B, H, Tq, hd]; k, v: [B, H, Tk, hd] with Tk = q_offset + Tq; c: [B, H, Tk] cumulative
    log-forget of every key (the query rows use c[..., q_offset:])."""
    T = q.shape[-2]
    acc = torch.promote_types(q.dtype, torch.float32)          # fp32, or fp64 for fp64 inputs
    c = c.to(torch.promote_types(c.dtype, acc))
    half = acc != q.dtype
    sc = q.shape[-1] ** -0.5 if scale is None else scale
    outs = []
    for s, e in query_blocks(T, block_size):
        ke = q_offset + e                                      # keys visible to the block
        mask = c[..., q_offset + s:ke, None] - c[..., None, :ke]   # [B, H, tq, ke]
        if bias_fn is not None:
            mask = mask + bias_fn(s, e)[..., :ke].to(mask.dtype)
        mask = mask.masked_fill(~causal_mask(e - s, ke, q_offset + s, q.device), float("-inf"))
        if half:       # fp32 logits and softmax; only the weights go back to the input dtype
            logits = (q[:, :, s:e] @ k[:, :, :ke].transpose(-1, -2)).to(mask.dtype) * sc + mask
            outs.append(logits.softmax(-1).to(v.dtype) @ v[:, :, :ke])
        else:
            outs.append(F.scaled_dot_product_attention(q[:, :, s:e], k[:, :, :ke], v[:, :, :ke],
                                                       attn_mask=mask.to(q.dtype), scale=scale))
    return torch.cat(outs, dim=2)
