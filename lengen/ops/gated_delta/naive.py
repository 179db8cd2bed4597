"""The gated delta rule token by token (Yang, Kautz & Hatamizadeh, "Gated Delta Networks:
Improving Mamba2 with Delta Rule", ICLR 2025, Sec. 3.2): the reference the chunked form
(:mod:`lengen.ops.gated_delta.chunked`) is tested against.

With the state S_t [d_v, d_k] the paper writes

    S_t = S_{t-1} (alpha_t (I - beta_t k_t k_t^T)) + beta_t v_t k_t^T,    o_t = S_t q_t,

a decay alpha_t in (0, 1] (Mamba-2's gate) times the delta rule's rank-one correction with
learning rate beta_t in (0, 1). Here the state is kept transposed, S [d_k, d_v], as
flash-linear-attention's kernels keep it, and the update is the equivalent

    S <- alpha_t S;   u_t = beta_t (v_t - S^T k_t);   S <- S + k_t u_t^T;   o_t = S^T (scale q_t).
"""
from __future__ import annotations

import torch


def gated_delta_naive(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                      beta: torch.Tensor, state: torch.Tensor | None = None,
                      scale: float | None = None):
    """q, k [B, T, H, K] (L2-normalised by the caller), v [B, T, H, V], g [B, T, H] (log alpha,
    <= 0), beta [B, T, H], state [B, H, K, V] or None (zeros); ``scale`` multiplies q (default
    K ** -0.5) -> (o [B, T, H, V], the state after the last token [B, H, K, V])."""
    Bs, T, H, K = k.shape
    V = v.shape[-1]
    scale = K ** -0.5 if scale is None else scale
    S = q.new_zeros(Bs, H, K, V) if state is None else state
    alpha = g.exp()
    out = []
    for t in range(T):
        S = alpha[:, t, :, None, None] * S
        kt = k[:, t]                                                      # [B, H, K]
        u = beta[:, t, :, None] * (v[:, t] - torch.einsum("bhk,bhkv->bhv", kt, S))
        S = S + kt[..., None] * u[:, :, None, :]
        out.append(torch.einsum("bhk,bhkv->bhv", q[:, t] * scale, S))     # [B, H, V]
    o = torch.stack(out, dim=1) if out else v.new_zeros(Bs, 0, H, V)
    return o, S
