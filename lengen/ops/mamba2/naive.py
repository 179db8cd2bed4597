"""The SSD recurrence of Mamba-2 (Dao & Gu, "Transformers are SSMs", ICML 2024), token by token:
the reference the chunked algorithm (:mod:`lengen.ops.mamba2.chunked`) is tested against.

Per head, with a scalar decay (the SSD restriction of the selective SSM of eq. (1), with
``A_t = a_t I``, Sec. 3) and the state h_t [P, N] (head dim P, state size N):

    h_t = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T          (discretised: Abar = exp(dt A), Bbar = dt B)
    y_t = h_t C_t
"""
from __future__ import annotations

import torch


def heads_of_groups(t: torch.Tensor, n_heads: int) -> torch.Tensor:
    """B or C [B, T, G, N] -> [B, T, H, N]: head h reads group h // (H / G) (Mamba-2's groups,
    the multi-value layout of the paper's Sec. 7.2)."""
    return t.repeat_interleave(n_heads // t.shape[2], dim=2)


def ssd_naive(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
              C: torch.Tensor, state: torch.Tensor | None = None):
    """x [B, T, H, P], dt [B, T, H] (> 0), A [H] (< 0), B / C [B, T, G, N], state [B, H, P, N]
    or None (zeros) -> (y [B, T, H, P], the state after the last token [B, H, P, N])."""
    Bs, T, H, P = x.shape
    Bm, Cm = heads_of_groups(B, H), heads_of_groups(C, H)                  # [B, T, H, N]
    h = x.new_zeros(Bs, H, P, Bm.shape[-1]) if state is None else state
    decay = torch.exp(dt * A)                                            # [B, T, H]
    ys = []
    for t in range(T):
        h = (decay[:, t, :, None, None] * h
             + (dt[:, t, :, None] * x[:, t])[..., None] * Bm[:, t, :, None, :])
        ys.append((h * Cm[:, t, :, None, :]).sum(-1))                     # [B, H, P]
    y = torch.stack(ys, dim=1) if ys else x.new_zeros(Bs, 0, H, P)
    return y, h
