"""Differential attention (Ye et al. 2024, "Differential Transformer"), dense reference.

For each of the H differential heads h, the two query/key halves are the ordinary heads 2h and
2h+1 (each of width hd), and the value has width 2*hd:

    A1 = softmax(q_{2h} k_{2h}^T * scale + bias_{2h})      A2 = same with 2h+1
    out_h = (A1 - lambda * A2) v_h

q, k: [B, 2H, T, hd]; v: [B, H, T, 2hd]; lam: a scalar tensor (one lambda per layer, as in the
public code) or one per differential head ([H]). The positional-scheme bias, if any, has one map
per half ([.., 2H, tq, Tk]). The per-head RMSNorm and the ``1 - lambda_init`` factor belong to the
attention module, not to this op.
"""
from __future__ import annotations

import torch

from lengen.ops.common import causal_mask


def combine_halves(a: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """a: [B, 2H, ...] -> a[:, 0::2] - lam * a[:, 1::2], lam a scalar or [H] tensor."""
    lam = torch.as_tensor(lam, dtype=a.dtype, device=a.device)
    lam = lam.reshape(lam.shape + (1,) * (a.dim() - 2))          # [H] -> [H, 1, ...]
    return a[:, 0::2] - lam * a[:, 1::2]


def check_shapes(q, v) -> None:
    if q.shape[1] != 2 * v.shape[1] or v.shape[-1] != 2 * q.shape[-1]:
        raise ValueError(f"diff attention wants q/k [B, 2H, T, hd] and v [B, H, T, 2hd]; got "
                         f"q {tuple(q.shape)}, v {tuple(v.shape)}")


def diff_attention_naive(q, k, v, lam, *, causal=True, bias_fn=None, scale=None,
                         return_weights=False):
    check_shapes(q, v)
    T, Tk = q.shape[-2], k.shape[-2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    logits = (q @ k.transpose(-1, -2)) * scale                   # [B, 2H, T, Tk]
    if bias_fn is not None:
        logits = logits + bias_fn(0, T)
    if causal:
        logits = logits.masked_fill(~causal_mask(T, Tk, 0, q.device), float("-inf"))
    w = combine_halves(logits.softmax(-1), lam)                  # [B, H, T, Tk], may be negative
    out = w @ v                                                  # [B, H, T, 2hd]
    return (out, w) if return_weights else out
