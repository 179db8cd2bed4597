"""Stick-breaking attention over query blocks (equations in
:mod:`lengen.ops.stickbreaking.naive`).

Each query row's weights depend only on that row's logits, so a block of rows needs its own
[B, H, block, keys] logits only; the products ``prod_{j < k < i} (1 - beta_ik)`` are a reversed
exclusive cumulative sum of ``log(1 - beta)`` along the keys (the dense reference forms them with
a triangular matrix product instead). Peak memory grows linearly in T. ``q_offset``: the query
rows are keys q_offset.. of k, v (a cached decoding step).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from lengen.ops.common import query_blocks


def stickbreaking_attention_chunked(q, k, v, *, bias_fn=None, scale=None, attend_current=False,
                                    remainder="current", block_size=256, q_offset=0):
    """q: [B, H, Tq, hd]; k, v: [B, H, Tk, hd], Tk = q_offset + Tq -> [B, H, Tq, hd_v]."""
    T = q.shape[-2]
    sc = q.shape[-1] ** -0.5 if scale is None else scale
    acc = torch.promote_types(q.dtype, torch.float32)
    floor = math.log(torch.finfo(acc).tiny)                        # -87.3 (fp32), -708.4 (fp64)
    outs = []
    for s, e in query_blocks(T, block_size):
        ke = q_offset + e                                          # keys visible to the block
        z = (q[:, :, s:e] @ k[:, :, :ke].transpose(-1, -2)).to(acc) * sc     # [B, H, tq, ke]
        if bias_fn is not None:
            z = z + bias_fn(s, e)[..., :ke].to(acc)
        rows = torch.arange(q_offset + s, q_offset + e, device=q.device)[:, None]
        cols = torch.arange(ke, device=q.device)[None, :]
        valid = cols <= rows if attend_current else cols < rows
        log_rest = F.logsigmoid(-z).masked_fill(~valid, 0.0)         # log(1 - beta)
        # sum_{k > j} log(1 - beta_ik): the reversed cumulative sum from key j + 1 on (not the
        # row total minus a cumulative sum: that loses ~eps * |total|, 2e-3 at T = 1024 in fp32)
        later = F.pad(log_rest.flip(-1).cumsum(-1).flip(-1)[..., 1:], (0, 1))
        log_beta = z + log_rest                                      # log sigmoid(z)
        log_w = log_beta + later
        # weights below the dtype's smallest normal number become exact zeros: exp would make
        # denormals there, which CPUs compute many times slower (what is dropped is < tiny)
        w = log_w.masked_fill(~valid | (log_w < floor), float("-inf")).exp()   # [B,H,tq,ke]
        out = w.to(v.dtype) @ v[:, :, :ke]
        if remainder == "current":
            out = out + (1 - w.sum(-1, keepdim=True)).to(v.dtype) * v[:, :, q_offset + s:ke]
        outs.append(out)
    return torch.cat(outs, dim=2)
