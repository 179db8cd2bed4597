"""Forgetting attention (Lin et al. 2025, "Forgetting Transformer"), dense reference.

    f_t    = sigmoid(w_f x_t + b_f)           per head and token, given as log_f = log f_t
    c_i    = sum_{t<=i} log f_t               cumulative log-forget
    logits = q_i k_j / sqrt(d) + c_i - c_j    for j <= i    (= sum_{t=j+1..i} log f_t)
    out    = softmax(logits) v

log_f: [B, H, T]. The diagonal is always visible, so no row is empty.
"""
from __future__ import annotations

import torch

from lengen.ops.common import causal_mask


def fot_attention_naive(q, k, v, log_f, *, bias_fn=None, scale=None, return_weights=False):
    T = q.shape[-2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    # cumsum in at least fp32 (fp64 inputs stay fp64)
    c = log_f.to(torch.promote_types(log_f.dtype, torch.float32)).cumsum(-1).to(q.dtype)  # [B, H, T]
    logits = (q @ k.transpose(-1, -2)) * scale + c[..., :, None] - c[..., None, :]  # [B, H, T, T]
    if bias_fn is not None:
        logits = logits + bias_fn(0, T)
    logits = logits.masked_fill(~causal_mask(T, T, 0, q.device), float("-inf"))
    w = logits.softmax(-1)
    out = w @ v
    return (out, w) if return_weights else out
