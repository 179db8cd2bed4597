"""Forgetting attention (Lin et al. 2025, "Forgetting Transformer"), dense reference.

    f_t    = sigmoid(w_f x_t + b_f)           per head and token, given as log_f = log f_t
    c_i    = sum_{t<=i} log f_t               cumulative log-forget
    logits = q_i k_j / sqrt(d) + c_i - c_j    for j <= i    (= sum_{t=j+1..i} log f_t)
    out    = softmax(logits) v

log_f: [B, H, T]. The diagonal is always visible, so no row is empty.

Precision: ``c`` grows like ``T * mean(log f)`` (hundreds at T = 2048), so in bf16/fp16 the
difference ``c_i - c_j`` of two rounded cumulative sums loses everything near the diagonal
(bf16 has a spacing of 1.0 at 200). ``c``, the logits and the softmax are therefore kept in at
least fp32 whatever the input dtype; only the weights are cast back for ``w @ v``.
"""
from __future__ import annotations

import torch

from lengen.ops.common import causal_mask


def fot_attention_naive(q, k, v, log_f, *, bias_fn=None, scale=None, return_weights=False):
    T = q.shape[-2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    acc = torch.promote_types(q.dtype, torch.float32)          # fp32, or fp64 for fp64 inputs
    c = log_f.to(acc).cumsum(-1)                               # [B, H, T], never half precision
    logits = (q @ k.transpose(-1, -2)).to(acc) * scale + c[..., :, None] - c[..., None, :]
    if bias_fn is not None:                                    # logits: [B, H, T, T]
        logits = logits + bias_fn(0, T).to(acc)
    logits = logits.masked_fill(~causal_mask(T, T, 0, q.device), float("-inf"))
    w = logits.softmax(-1).to(v.dtype)
    out = w @ v
    return (out, w) if return_weights else out
