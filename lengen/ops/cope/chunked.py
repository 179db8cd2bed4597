"""CoPE over query blocks: same maths as ``naive.py``, peak memory O(block * T).

A query row's contextual positions depend only on that row's own gates, so rows split into
independent blocks; keys right of the block are causally invisible and skipped.

``q_offset`` serves cached decoding: the query rows are the last ``Tq`` of the ``Tk`` keys, so a
new row's gates and counted positions run over every cached key, as in the full matrix.
"""
from __future__ import annotations

import torch

from lengen.ops.common import causal_mask, masked_softmax, query_blocks
from lengen.ops.cope.naive import cope_logits, raw_scores


def cope_attention_chunked(q, k, v, pos_emb, *, bias_fn=None, scale=None, block_size=256,
                           q_offset=0):
    """q: [B, H, Tq, hd], k, v: [B, H, q_offset + Tq, hd] -> [B, H, Tq, hd]."""
    T = q.shape[-2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    outs = []
    for s, e in query_blocks(T, block_size):
        ke = q_offset + e                                              # keys visible to the block
        visible = causal_mask(e - s, ke, q_offset + s, q.device)
        qb = q[:, :, s:e]
        logits = cope_logits(raw_scores(qb, k[:, :, :ke]), qb, pos_emb, visible, scale)
        if bias_fn is not None:
            logits = logits + bias_fn(s, e)[..., :ke]
        outs.append(masked_softmax(logits, visible).to(v.dtype) @ v[:, :, :ke])  # [B, H, tq, hd]
    return torch.cat(outs, dim=2)
