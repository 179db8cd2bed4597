"""TRA over query blocks: same maths as ``naive.py``, peak memory O(block * T) instead of O(T^2).

Each query row's contextual distances depend only on that row's own threshold mask, so rows can
be processed in independent blocks; keys right of the block are causally invisible and skipped.
This is the default path at evaluation and is tested equal to the reference (values, gradients).

``q_offset`` serves cached decoding: the query rows are the last ``Tq`` of the ``Tk`` keys, so a
new row's ``Dbar`` is the reverse cumulative sum of its own threshold mask over every cached key
(``tra_scores`` on the row against keys ``0 .. q_offset + r``), exactly as in the full matrix.
"""
from __future__ import annotations

import torch

from lengen.ops.common import causal_mask, masked_softmax, query_blocks
from lengen.ops.tra.naive import tra_scores


def tra_attention_chunked(q, k, v, log_gate, *, bias_fn=None, scale=None, block_size=256,
                          q_offset=0):
    """q: [B, H, Tq, hd], k, v: [B, H, q_offset + Tq, hd], log_gate: [B, H, Tq] (query rows)."""
    T = q.shape[-2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    outs = []
    for s, e in query_blocks(T, block_size):
        ke = q_offset + e                                              # keys visible to the block
        sc = (q[:, :, s:e] @ k[:, :, :ke].transpose(-1, -2)) * scale  # [B, H, tq, ke]
        logits, keep = tra_scores(sc, log_gate[:, :, s:e],
                                  causal_mask(e - s, ke, q_offset + s, q.device))
        if bias_fn is not None:
            logits = logits + bias_fn(s, e)[..., :ke]
        outs.append(masked_softmax(logits, keep).to(v.dtype) @ v[:, :, :ke])       # [B, H, tq, hd]
    return torch.cat(outs, dim=2)
