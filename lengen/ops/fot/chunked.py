"""Forgetting attention through SDPA over query blocks: the decay bias c_i - c_j of a block is
[B, H, block, T] at most, so peak memory grows linearly in T (default at evaluation).

bf16/fp16 inputs: SDPA wants its additive mask in the input dtype, and ``c_i - c_j`` rounded to
bf16 is off by up to a unit at T ~ 2000 (see :mod:`lengen.ops.fot.naive`), so half-precision
blocks compute their logits and softmax in fp32 instead of calling SDPA."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from lengen.ops.common import causal_mask, query_blocks


def fot_attention_chunked(q, k, v, log_f, *, bias_fn=None, scale=None, block_size=256):
    T = q.shape[-2]
    acc = torch.promote_types(q.dtype, torch.float32)          # fp32, or fp64 for fp64 inputs
    c = log_f.to(acc).cumsum(-1)                               # [B, H, T], never half precision
    half = acc != q.dtype
    sc = q.shape[-1] ** -0.5 if scale is None else scale
    outs = []
    for s, e in query_blocks(T, block_size):
        mask = c[..., s:e, None] - c[..., None, :e]            # [B, H, tq, e]
        if bias_fn is not None:
            mask = mask + bias_fn(s, e)[..., :e].to(acc)
        mask = mask.masked_fill(~causal_mask(e - s, e, s, q.device), float("-inf"))
        if half:       # fp32 logits and softmax; only the weights go back to the input dtype
            logits = (q[:, :, s:e] @ k[:, :, :e].transpose(-1, -2)).to(acc) * sc + mask
            outs.append(logits.softmax(-1).to(v.dtype) @ v[:, :, :e])
        else:
            outs.append(F.scaled_dot_product_attention(q[:, :, s:e], k[:, :, :e], v[:, :, :e],
                                                       attn_mask=mask.to(q.dtype), scale=scale))
    return torch.cat(outs, dim=2)
