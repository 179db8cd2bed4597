"""Threshold Relative Attention, dense reference (TRA paper, eqs. 3-12).

    S      = q k^T / sqrt(d)                                   (1)
    M_ij   = [S_ij > 0] and j <= i                             (4) threshold, causal window
    Dbar_ij = sum_{k=j..i} M_ik                                (6) contextual distance: the
             nearest surviving key has distance 1; non-surviving keys are not counted
    logits = relu(S) + Dbar * log(delta_i)                     (9-10) delta_i = sigmoid(w x_i + b)
    A      = softmax over surviving keys only                  (11-12)

A query row with no surviving key outputs zero (it never falls back to a uniform distribution
over masked, possibly future, keys). ``log_gate`` is ``log(delta)`` = logsigmoid(...) per
(batch, head, query), shape [B, H, T]. An optional positional-scheme bias is added to the logits
of the surviving keys.
"""
from __future__ import annotations

import torch

from lengen.ops.common import causal_mask, masked_softmax


def tra_scores(s: torch.Tensor, log_gate: torch.Tensor, visible: torch.Tensor):
    """s: [B, H, tq, tk] scaled scores; log_gate: [B, H, tq]; visible: [tq, tk] causal window.

    Returns (logits, keep) with keep = surviving keys and logits valid where keep.
    """
    keep = (s > 0) & visible                                   # [B, H, tq, tk]
    # reverse cumulative sum along keys: Dbar_ij = #survivors at positions j..i (keep is 0 right
    # of the query, so summing to the end of the row equals summing to i). Written as
    # total - cumsum + self to avoid two flips; counts are exact integers in fp32 up to 2^24.
    ct = torch.promote_types(s.dtype, torch.float32)           # fp32 for bf16/fp16, fp64 kept
    kf = keep.to(ct)
    dbar = kf.sum(-1, keepdim=True) - kf.cumsum(-1) + kf      # [B, H, tq, tk]
    logits = s.to(ct).relu() + dbar * log_gate.to(ct).unsqueeze(-1)   # at least fp32
    return logits, keep


def tra_attention_naive(q, k, v, log_gate, *, bias_fn=None, scale=None, return_weights=False):
    T = q.shape[-2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    s = (q @ k.transpose(-1, -2)) * scale                      # [B, H, T, T]
    logits, keep = tra_scores(s, log_gate, causal_mask(T, T, 0, q.device))
    if bias_fn is not None:
        logits = logits + bias_fn(0, T)
    w = masked_softmax(logits, keep).to(v.dtype)               # [B, H, T, T], zero rows allowed
    out = w @ v
    return (out, w) if return_weights else out
