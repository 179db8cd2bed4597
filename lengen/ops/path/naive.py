"""PaTH attention (Yang et al., NeurIPS 2025, "PaTH Attention:
Position Encoding via Accumulating Householder Transformations", Sec. 3), dense reference:
materialises [B, H, T, T].

Every token t carries a data-dependent Householder-like transform ``H_t = I - beta_t w_t w_t^T``
(``w_t`` a unit vector per head, ``beta_t`` in (0, 2), so ``H_t`` may reflect); the logit of
query i against key j goes through the transforms of the tokens after j up to i::

    z_ij = q_i^T (H_i H_{i-1} ... H_{j+1}) k_j * scale + bias_ij      for j <= i (z_ii = q_i.k_i)
    out_i = softmax_j(z_ij) v

(the cumulative product replaces RoPE's fixed rotation by ``R^(i - j)``). This reference scans
the keys from the last to the first, carrying every query through one more transform per step:
at key j, row i (i >= j) holds ``u_i = H_{j+1} ... H_i q_i`` (H symmetric), so ``z_ij = u_i.k_j``;
moving on to key j - 1 applies ``H_j`` to the rows i >= j. T steps of O(T hd) each.

Precision: the carried queries and the logits are kept in at least fp32.
"""
from __future__ import annotations

import torch


def path_logits(q, k, w, beta, *, q_offset=0):
    """z_ij = q_i^T H_i ... H_{j+1} k_j (unscaled, no mask) -> [B, H, Tq, Tk] in at least fp32.
    q: [B, H, Tq, hd] are keys q_offset.. of k: [B, H, Tk, hd]; w: [B, H, Tw, hd], beta:
    [B, H, Tw] are the transforms of keys Tk - Tw.. (keys before them, a cache's, are already
    carried to key Tk - Tw - 1: no transform between them). Entries j > i are not meaningful."""
    Tq, Tk = q.shape[-2], k.shape[-2]
    first = Tk - w.shape[-2]                          # keys from here on carry a transform
    acc = torch.promote_types(q.dtype, torch.float32)
    u = q.to(acc)                                     # the carried queries [B, H, Tq, hd]
    kk, ww, bb = k.to(acc), w.to(acc), beta.to(acc)
    rows = torch.arange(q_offset, q_offset + Tq, device=q.device)
    cols = []
    for j in range(Tk - 1, -1, -1):
        cols.append((u * kk[:, :, j, None, :]).sum(-1))                   # [B, H, Tq]
        if j >= first:                                # apply H_j to the rows i >= j
            wj = ww[:, :, j - first, None, :]                             # [B, H, 1, hd]
            upd = u - bb[:, :, j - first, None, None] * (u * wj).sum(-1, keepdim=True) * wj
            u = torch.where((rows >= j)[None, None, :, None], upd, u)
    return torch.stack(cols[::-1], dim=-1)                                # [B, H, Tq, Tk]


def path_attention_naive(q, k, v, w, beta, *, bias_fn=None, scale=None, return_weights=False):
    """q, k, v, w: [B, H, T, hd], beta: [B, H, T] -> [B, H, T, hd]; causal by definition."""
    T = q.shape[-2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    z = path_logits(q, k, w, beta) * scale                               # [B, H, T, T]
    if bias_fn is not None:
        z = z + bias_fn(0, T).to(z.dtype)
    keep = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    wts = z.masked_fill(~keep, float("-inf")).softmax(-1).to(v.dtype)
    out = wts @ v
    return (out, wts) if return_weights else out
