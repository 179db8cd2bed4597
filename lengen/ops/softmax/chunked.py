"""Softmax attention through ``F.scaled_dot_product_attention``, blocked over queries when a bias
is present so that the bias (and the score matrix) is never larger than [H, block, T]."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from lengen.ops.common import causal_mask, query_blocks


def softmax_attention_chunked(q, k, v, *, causal=True, bias_fn=None, scale=None, block_size=256):
    if bias_fn is None:
        # SDPA's fused kernels already use O(T) memory; no blocking needed.
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    T = q.shape[-2]
    outs = []
    for s, e in query_blocks(T, block_size):
        tk = e if causal else k.shape[-2]                     # causal: keys after e are invisible
        mask = bias_fn(s, e)[..., :tk].to(q.dtype)            # [H, tq, tk]
        if causal:
            mask = mask.masked_fill(~causal_mask(e - s, tk, s, q.device), float("-inf"))
        outs.append(F.scaled_dot_product_attention(q[:, :, s:e], k[:, :, :tk], v[:, :, :tk],
                                                   attn_mask=mask, scale=scale))
    return torch.cat(outs, dim=2)
