"""Selective attention over query blocks (equations in :mod:`lengen.ops.selective.naive`).

Each block of query rows builds its logits against the keys it can see ([B, H, block, keys]),
so peak memory grows linearly in T. The accumulated selection F of the rows before the block
is carried from block to block as one vector over the keys, ``carry_j = sum_{i' < s} S_i'j``
([B, keys so far]); inside a block F is the carry plus an exclusive cumulative sum of the
block's own selection rows.

A cached decoding step passes the carry of every query decoded before it
(``carry``, [B, q_offset]) and gets back the carry after its rows ([B, Tk]), which the attention
kind keeps in its cache.
"""
from __future__ import annotations

import torch

from lengen.ops.common import causal_mask, query_blocks


def selective_attention_chunked(q, k, v, *, bias_fn=None, scale=None, mask_bos=False,
                                block_size=256):
    out, _ = selective_attention_blocks(q, k, v, bias_fn=bias_fn, scale=scale,
                                        mask_bos=mask_bos, block_size=block_size)
    return out


def selective_attention_blocks(q, k, v, *, bias_fn=None, scale=None, mask_bos=False,
                               block_size=256, q_offset=0, carry=None):
    """q: [B, H, Tq, hd]; k, v: [B, H, Tk, hd] with Tk = q_offset + Tq; carry: [B, q_offset]
    (None: zeros) -> (out [B, H, Tq, hd_v], carry [B, Tk]) in at least fp32."""
    B, T = q.shape[0], q.shape[-2]
    Tk = k.shape[-2]
    sc = q.shape[-1] ** -0.5 if scale is None else scale
    acc = torch.promote_types(q.dtype, torch.float32)
    F = q.new_zeros(B, Tk, dtype=acc)                      # carry, over every key
    if carry is not None and carry.shape[-1]:
        F = torch.cat([carry.to(acc), F[:, carry.shape[-1]:]], dim=-1)
    outs = []
    for s, e in query_blocks(T, block_size):
        ke = q_offset + e                                  # keys visible to the block
        logits = (q[:, :, s:e] @ k[:, :, :ke].transpose(-1, -2)).to(acc) * sc   # [B,H,tq,ke]
        if bias_fn is not None:
            logits = logits + bias_fn(s, e)[..., :ke].to(acc)
        logits = logits.masked_fill(~causal_mask(e - s, ke, q_offset + s, q.device),
                                    float("-inf"))
        S = torch.relu(logits[:, 0])                                            # [B, tq, ke]
        rows = torch.arange(q_offset + s, q_offset + e, device=q.device)[:, None]
        cols = torch.arange(ke, device=q.device)[None, :]
        drop = cols == rows                                                     # self
        if not mask_bos:
            drop = drop | (cols == 0)                                           # first token
        S = S.masked_fill(drop, 0.0)
        inner = torch.cat([torch.zeros_like(S[:, :1]), S.cumsum(1)[:, :-1]], 1)  # rows < r
        F_blk = F[:, None, :ke] + inner                                         # [B, tq, ke]
        w = (logits - F_blk[:, None]).softmax(-1).to(v.dtype)
        outs.append(w @ v[:, :, :ke])
        F = torch.cat([F[:, :ke] + S.sum(1), F[:, ke:]], dim=-1)
    return torch.cat(outs, dim=2), F
