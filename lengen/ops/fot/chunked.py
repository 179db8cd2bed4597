"""Forgetting attention through SDPA over query blocks: the decay bias c_i - c_j of a block is
[B, H, block, T] at most, so peak memory grows linearly in T (default at evaluation)."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from lengen.ops.common import causal_mask, query_blocks


def fot_attention_chunked(q, k, v, log_f, *, bias_fn=None, scale=None, block_size=256):
    T = q.shape[-2]
    # cumsum in at least fp32 (fp64 inputs stay fp64)
    c = log_f.to(torch.promote_types(log_f.dtype, torch.float32)).cumsum(-1).to(q.dtype)  # [B, H, T]
    outs = []
    for s, e in query_blocks(T, block_size):
        mask = c[..., s:e, None] - c[..., None, :e]            # [B, H, tq, e]
        if bias_fn is not None:
            mask = mask + bias_fn(s, e)[..., :e]
        mask = mask.masked_fill(~causal_mask(e - s, e, s, q.device), float("-inf"))
        outs.append(F.scaled_dot_product_attention(q[:, :, s:e], k[:, :, :e], v[:, :, :e],
                                                   attn_mask=mask, scale=scale))
    return torch.cat(outs, dim=2)
