"""TRA over query blocks: same maths as ``naive.py``, peak memory O(block * T) instead of O(T^2).

Each query row's contextual distances depend only on that row's own threshold mask, so rows can
be processed in independent blocks; keys right of the block are causally invisible and skipped.
This is the default path at evaluation and is tested equal to the reference (values, gradients).
"""
from __future__ import annotations

import torch

from lengen.ops.common import causal_mask, masked_softmax, query_blocks
from lengen.ops.tra.naive import tra_scores


def tra_attention_chunked(q, k, v, log_gate, *, bias_fn=None, scale=None, block_size=256):
    T = q.shape[-2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    outs = []
    for s, e in query_blocks(T, block_size):
        sc = (q[:, :, s:e] @ k[:, :, :e].transpose(-1, -2)) * scale   # [B, H, tq, e]
        logits, keep = tra_scores(sc, log_gate[:, :, s:e], causal_mask(e - s, e, s, q.device))
        if bias_fn is not None:
            logits = logits + bias_fn(s, e)[..., :e]
        outs.append(masked_softmax(logits, keep).to(v.dtype) @ v[:, :, :e])        # [B, H, tq, hd]
    return torch.cat(outs, dim=2)
