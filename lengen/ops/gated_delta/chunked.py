"""The gated delta rule in chunks (Yang et al., ICLR 2025, Sec. 3.3; the WY / UT-transform form
of DeltaNet's chunkwise algorithm, Yang et al. NeurIPS 2024, with the decay folded in): equal to
:func:`lengen.ops.gated_delta.naive.gated_delta_naive`, with memory linear in T.

Unrolling the recurrence over a chunk of L tokens from the state S0 entering it, with the
cumulative log-decay ``G_t = sum_{s<=t} log alpha_s`` (so ``gamma_t = exp(G_t)``), every state is
``S_t = gamma_t S0 + sum_{s<=t} (gamma_t / gamma_s) k_s w_s^T`` where the rows w_t solve the unit
lower-triangular system

    w_t + beta_t sum_{s<t} (gamma_t / gamma_s) (k_t . k_s) w_s = beta_t (v_t - gamma_t S0^T k_t),

i.e. ``W = (I + A)^{-1} diag(beta) V - (I + A)^{-1} diag(beta gamma) K S0`` (the UT transform;
both inverses are products with the same triangular matrix, solved once per chunk). Then

    o_t = gamma_t S0^T q_t + sum_{s<=t} (gamma_t / gamma_s) (q_t . k_s) w_s,
    S_L = gamma_L S0 + sum_s (gamma_L / gamma_s) k_s w_s^T.

The triangular solves and the within-chunk products run for all chunks at once; the state is
passed across chunks in a loop.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def gated_delta_chunked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor,
                        beta: torch.Tensor, state: torch.Tensor | None = None,
                        scale: float | None = None, chunk: int = 64):
    """Arguments and result as :func:`lengen.ops.gated_delta.naive.gated_delta_naive`;
    ``chunk``: L."""
    Bs, T, H, K = k.shape
    V = v.shape[-1]
    scale = K ** -0.5 if scale is None else scale
    S = q.new_zeros(Bs, H, K, V) if state is None else state
    if T == 0:
        return v.new_zeros(Bs, 0, H, V), S
    L = min(chunk, T)
    pad = (-T) % L            # padded tokens: alpha = 1, beta = 0, k = v = 0 -> S unchanged
    n = (T + pad) // L

    def chunks(t):            # [B, T, H, ...] -> [B, n, H, L, ...]
        t = F.pad(t, (0, 0) * (t.dim() - 2) + (0, pad))
        return t.reshape(Bs, n, L, H, *t.shape[3:]).transpose(2, 3)

    q, k, v = chunks(q * scale), chunks(k), chunks(v)                     # [B, n, H, L, .]
    g, beta = chunks(g), chunks(beta)                                     # [B, n, H, L]
    G = g.cumsum(-1)
    idx = torch.arange(L, device=q.device)
    strict = idx[:, None] > idx[None, :]                                  # s < t
    diff = G[..., :, None] - G[..., None, :]                              # [.., Lt, Ls]
    decay_lt = torch.where(strict, diff, float("-inf")).exp()             # s < t
    decay_le = torch.where(strict | (idx[:, None] == idx[None, :]), diff, float("-inf")).exp()
    A = beta[..., None] * decay_lt * (k @ k.transpose(-1, -2))            # [.., L, L]
    eye = torch.eye(L, dtype=q.dtype, device=q.device)
    rhs = torch.cat([beta[..., None] * v, (beta * G.exp())[..., None] * k], dim=-1)
    sol = torch.linalg.solve_triangular(eye + A, rhs, upper=False, unitriangular=True)
    U, Wk = sol.split([V, K], dim=-1)                                     # [.., L, V], [.., L, K]
    qk = (q @ k.transpose(-1, -2)) * decay_le                             # [.., Lt, Ls]
    gq = G.exp()[..., None] * q                                           # gamma_t q_t
    to_end = (G[..., -1:] - G).exp()[..., None] * k                       # (gamma_L/gamma_s) k_s
    whole = G[..., -1].exp()                                              # [B, n, H]
    out = []
    for c in range(n):                                                    # across chunks
        W = U[:, c] - Wk[:, c] @ S                                        # [B, H, L, V]
        out.append(gq[:, c] @ S + qk[:, c] @ W)
        S = whole[:, c, :, None, None] * S + to_end[:, c].transpose(-1, -2) @ W
    o = torch.stack(out, dim=1)                                           # [B, n, H, L, V]
    return o.transpose(2, 3).reshape(Bs, n * L, H, V)[:, :T], S
