"""Selective attention (Leviathan, Kalman, Matias, ICLR 2025, "Selective Attention Improves
Transformer", Sec. 3), dense reference: materialises [B, H, T, T].

    z      = q_i k_j * scale + bias_ij, -inf for j > i      logits of every head   [B, H, T, T]
    S_ij   = ReLU(z^(0)_ij)                                  selection: head 0's logits
    S_ii   = 0                                               a token never masks itself
    S_i0   = 0                                               the first token is never masked
                                                             (unless mask_bos)
    F_ij   = sum_{i' < i} S_i'j                              accumulated over earlier queries
    out_i  = softmax_j(z_ij - F_ij) v                        F subtracted from EVERY head

S_ij is how much query i asks that key j be dropped for all later queries; F_ij is what the
queries before i asked in total. Causal only (F accumulates over earlier queries).

Precision: the logits, S, F and the softmax are kept in at least fp32 (F is a sum over up to
T rows); only the weights are cast back for ``w @ v``.
"""
from __future__ import annotations

import torch

from lengen.ops.common import causal_mask


def selective_attention_naive(q, k, v, *, bias_fn=None, scale=None, mask_bos=False,
                              return_weights=False):
    """q, k, v: [B, H, T, hd] (q, k may be wider than v) -> [B, H, T, hd_v]."""
    T = q.shape[-2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    acc = torch.promote_types(q.dtype, torch.float32)
    logits = (q @ k.transpose(-1, -2)).to(acc) * scale                   # [B, H, T, T]
    if bias_fn is not None:
        logits = logits + bias_fn(0, T).to(acc)
    logits = logits.masked_fill(~causal_mask(T, T, 0, q.device), float("-inf"))
    S = torch.relu(logits[:, 0])                                        # [B, T, T]; future: 0
    drop = torch.eye(T, dtype=torch.bool, device=q.device)              # no self-masking
    if not mask_bos:
        drop[:, 0] = True                                               # key 0 never masked
    S = S.masked_fill(drop, 0.0)
    F = torch.cat([torch.zeros_like(S[:, :1]), S.cumsum(1)[:, :-1]], 1)  # sum over rows < i
    w = (logits - F[:, None]).softmax(-1).to(v.dtype)                   # [B, H, T, T]
    out = w @ v
    return (out, w) if return_weights else out
