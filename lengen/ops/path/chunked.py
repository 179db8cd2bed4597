"""PaTH attention over query blocks (equations in :mod:`lengen.ops.path.naive`): a block of
query rows carries only its own queries through the transforms, against the keys it can see, so
peak memory grows linearly in T ([B, H, block, keys] logits). Without gradients (evaluation) the
scan keeps one [B, H, block, hd] carry; with them, autograd keeps one per key step.

``q_offset`` with ``w``, ``beta`` of the new keys only: a cached decoding step, whose cached keys
were carried to the last cached token already (:func:`carry_keys`).
"""
from __future__ import annotations

import torch

from lengen.ops.common import causal_mask, query_blocks
from lengen.ops.path.naive import path_logits


def path_attention_chunked(q, k, v, w, beta, *, bias_fn=None, scale=None, block_size=256,
                           q_offset=0):
    """q: [B, H, Tq, hd]; k, v: [B, H, Tk, hd], Tk = q_offset + Tq; w: [B, H, Tw, hd], beta:
    [B, H, Tw]: the transforms of the last Tw keys (Tw = Tk without a cache) -> [B, H, Tq, hd]."""
    T, Tk = q.shape[-2], k.shape[-2]
    first = Tk - w.shape[-2]
    sc = q.shape[-1] ** -0.5 if scale is None else scale
    outs = []
    for s, e in query_blocks(T, block_size):
        ke = q_offset + e                                          # keys visible to the block
        z = path_logits(q[:, :, s:e], k[:, :, :ke], w[:, :, :ke - first],
                        beta[:, :, :ke - first], q_offset=q_offset + s) * sc   # [B,H,tq,ke]
        if bias_fn is not None:
            z = z + bias_fn(s, e)[..., :ke].to(z.dtype)
        z = z.masked_fill(~causal_mask(e - s, ke, q_offset + s, q.device), float("-inf"))
        outs.append(z.softmax(-1).to(v.dtype) @ v[:, :, :ke])
    return torch.cat(outs, dim=2)


def carry_keys(k, w, beta, first):
    """Keys carried to the last token: k_j -> H_{T-1} ... H_{j+1} k_j for every key j, where
    ``w``, ``beta`` are the transforms of keys first.. (the keys before ``first`` are carried to
    key first - 1 already). k: [B, H, Tk, hd] -> same shape, in k's dtype."""
    acc = torch.promote_types(k.dtype, torch.float32)
    kk, ww, bb = k.to(acc), w.to(acc), beta.to(acc)
    Tk = k.shape[-2]
    idx = torch.arange(Tk, device=k.device)
    for t in range(first, Tk):                                     # H_t on every key j < t
        wt = ww[:, :, t - first, None, :]
        upd = kk - bb[:, :, t - first, None, None] * (kk * wt).sum(-1, keepdim=True) * wt
        kk = torch.where((idx < t)[None, None, :, None], upd, kk)
    return kk.to(k.dtype)
