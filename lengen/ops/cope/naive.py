"""Contextual Position Encoding attention (CoPE; Golovneva et al. 2024), dense reference.

    s_ij   = q_i . k_j                                   raw dot product, causal window j <= i
    g_ij   = sigmoid(s_ij * scale)                       gate: does key j count for query i?
    p_ij   = min(sum_{t=j..i} g_it, npos - 1)            contextual position (reverse cumsum)
    z_i[n] = q_i . e[n]                                  n = 0..npos-1, e: [hd, npos] learned
    E_ij   = (1 - w) z_i[floor p_ij] + w z_i[ceil p_ij], w = p_ij - floor p_ij
    logits = (s_ij + E_ij) * scale (+ positional-scheme bias)
    out    = softmax over j <= i of logits, times v

``scale`` (default 1/sqrt(hd)) multiplies the sum ``s + E`` as in the public CoPE code (its
default, position logits added *before* dividing by sqrt(d)); the gates use the scaled score.
Gradients reach ``p`` only through the interpolation weight ``w`` (floor/ceil are integer
lookups), so the gates are trained, as in the paper. Positions and gates are computed in fp32
(fp64 for fp64 inputs).

``pos_emb`` is ``[hd, npos]`` (shared by all heads, as in the paper) or ``[H, hd, npos]``.
"""
from __future__ import annotations

import torch

from lengen.ops.common import causal_mask, masked_softmax


def raw_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """q k^T in at least fp32. The gates are summed over up to T keys into positions whose
    floor/ceil pick the position logits, so a bf16-rounded score matrix would shift positions
    across integer boundaries and visibly change the q/k gradients."""
    acc = torch.promote_types(q.dtype, torch.float32)
    return q.to(acc) @ k.to(acc).transpose(-1, -2)


def cope_logits(s: torch.Tensor, q: torch.Tensor, pos_emb: torch.Tensor, visible: torch.Tensor,
                scale: float) -> torch.Tensor:
    """s: [B, H, tq, tk] raw q.k; q: [B, H, tq, hd]; visible: [tq, tk] causal window.

    Returns the fp32 CoPE logits ``(s + E) * scale`` (valid where visible)."""
    npos = pos_emb.shape[-1]
    acc = torch.promote_types(s.dtype, torch.float32)           # fp32, or fp64 when given fp64
    s = s.to(acc)
    gates = torch.sigmoid(s * scale) * visible                   # 0 right of the query
    pos = gates.flip(-1).cumsum(-1).flip(-1).clamp(max=npos - 1)  # [B, H, tq, tk]
    z = q.to(acc) @ pos_emb.to(acc)                             # [B, H, tq, npos]
    lo = pos.detach().floor()
    w = pos - lo                                                 # differentiable in pos
    z_lo = z.gather(-1, lo.long())
    z_hi = z.gather(-1, pos.detach().ceil().long())
    return (s + z_lo * (1 - w) + z_hi * w) * scale


def cope_attention_naive(q, k, v, pos_emb, *, bias_fn=None, scale=None, return_weights=False):
    """q, k, v: [B, H, T, hd]; pos_emb: [hd, npos] or [H, hd, npos] -> [B, H, T, hd]."""
    T = q.shape[-2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    visible = causal_mask(T, T, 0, q.device)
    logits = cope_logits(raw_scores(q, k), q, pos_emb, visible, scale)   # [B, H, T, T] fp32
    if bias_fn is not None:
        logits = logits + bias_fn(0, T)
    w = masked_softmax(logits, visible).to(v.dtype)              # [B, H, T, T]
    out = w @ v
    return (out, w) if return_weights else out
