"""Stick-breaking attention (Tan et al., ICLR 2025, "Scaling Stick-Breaking
Attention: An Efficient Implementation and In-depth Study", Sec. 2), dense reference:
materialises [B, H, T, T] and forms the products with a triangular [T, T] matrix product.

    z_ij  = q_i k_j * scale + bias_ij
    beta_ij = sigmoid(z_ij)                                        for j < i
    A_ij  = beta_ij prod_{j < k < i} (1 - beta_ik)                 key j takes a fraction of
                                                                   what the nearer keys left
    log A_ij = logsigmoid(z_ij) + sum_{j < k < i} logsigmoid(-z_ik)         (log space)
    out_i = sum_{j < i} A_ij v_j + (1 - sum_j A_ij) v_i            remainder to the current
                                                                   token (``remainder``)

The weights sum to at most 1; what no earlier key took (``1 - sum_j A_ij``) goes to the current
token's own value, as the public reference's tests do (``o + rem[..., None] * v``);
``remainder='none'`` drops it (out_i = sum_j A_ij v_j). ``attend_current=True`` lets the stick
reach the current token too (j <= i, products over j < k <= i), the reference's option.
No softmax, no positional scheme needed: nearer keys are asked first, a built-in recency order.

Precision: logits, log-weights and their sums are kept in at least fp32.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

REMAINDERS = ("current", "none")


def stickbreaking_attention_naive(q, k, v, *, bias_fn=None, scale=None, attend_current=False,
                                  remainder="current", return_weights=False):
    """q, k, v: [B, H, T, hd] -> [B, H, T, hd_v]; causal by definition."""
    T = q.shape[-2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    acc = torch.promote_types(q.dtype, torch.float32)
    z = (q @ k.transpose(-1, -2)).to(acc) * scale                      # [B, H, T, T]
    if bias_fn is not None:
        z = z + bias_fn(0, T).to(acc)
    i = torch.arange(T, device=q.device)
    valid = (i[None, :] <= i[:, None]) if attend_current else (i[None, :] < i[:, None])
    log_beta = F.logsigmoid(z).masked_fill(~valid, float("-inf"))
    log_rest = F.logsigmoid(-z).masked_fill(~valid, 0.0)              # log(1 - beta)
    after = (i[:, None] > i[None, :]).to(acc)                          # [k, j]: 1 where k > j
    log_a = log_beta + log_rest @ after                                # sum over j < k (< i)
    w = log_a.exp()                                                    # [B, H, T, T]
    out = w.to(v.dtype) @ v
    if remainder == "current":
        out = out + (1 - w.sum(-1, keepdim=True)).to(v.dtype) * v
    return (out, w) if return_weights else out
