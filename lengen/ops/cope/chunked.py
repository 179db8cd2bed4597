"""CoPE over query blocks: same maths as ``naive.py``, peak memory O(block * T).

A query row's contextual positions depend only on that row's own gates, so rows split into
independent blocks; keys right of the block are causally invisible and skipped.
"""
from __future__ import annotations

import torch

from lengen.ops.common import causal_mask, masked_softmax, query_blocks
from lengen.ops.cope.naive import cope_logits, raw_scores


def cope_attention_chunked(q, k, v, pos_emb, *, bias_fn=None, scale=None, block_size=256):
    T = q.shape[-2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    outs = []
    for s, e in query_blocks(T, block_size):
        visible = causal_mask(e - s, e, s, q.device)
        qb = q[:, :, s:e]
        logits = cope_logits(raw_scores(qb, k[:, :, :e]), qb, pos_emb, visible, scale)
        if bias_fn is not None:
            logits = logits + bias_fn(s, e)[..., :e]
        outs.append(masked_softmax(logits, visible).to(v.dtype) @ v[:, :, :e])   # [B, H, tq, hd]
    return torch.cat(outs, dim=2)
