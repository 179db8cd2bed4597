"""The chunked SSD algorithm of Mamba-2 (Dao & Gu 2024, Sec. 6 / Listing 1 "ssd_minimal"):
equal to :func:`lengen.ops.mamba2.naive.ssd_naive`, with memory linear in T.

The sequence is cut into chunks of L tokens. With the cumulative log-decay ``c_i = sum_{s<=i}
dt_s A`` inside a chunk and the state h0 entering it:

* within the chunk (the quadratic, attention-like form; Sec. 6, the "diagonal
  blocks"): ``y_i += sum_{j<=i} (C_i . B_j) exp(c_i - c_j) dt_j x_j``;
* from earlier chunks ("off-diagonal blocks"): ``y_i += exp(c_i) h0 C_i``;
* the state it hands on: ``h = exp(c_L) h0 + sum_j exp(c_L - c_j) dt_j x_j B_j^T``,

the chunks' own terms computed for all chunks at once, the state passed across chunks in a loop
(the "recurrent across chunks" step; ssd_minimal's chunk-level segsum does it in one product).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from lengen.ops.mamba2.naive import heads_of_groups


def ssd_chunked(x: torch.Tensor, dt: torch.Tensor, A: torch.Tensor, B: torch.Tensor,
                C: torch.Tensor, state: torch.Tensor | None = None, chunk: int = 64):
    """Arguments and result as :func:`lengen.ops.mamba2.naive.ssd_naive`; ``chunk``: L."""
    Bs, T, H, P = x.shape
    Bm, Cm = heads_of_groups(B, H), heads_of_groups(C, H)                  # [B, T, H, N]
    N = Bm.shape[-1]
    h = x.new_zeros(Bs, H, P, N) if state is None else state
    if T == 0:
        return x.new_zeros(Bs, 0, H, P), h
    L = min(chunk, T)
    pad = (-T) % L              # padded tokens: decay exp(0) = 1 and no input, so h is unchanged
    a = F.pad(dt * A, (0, 0, 0, pad))                                    # [B, T', H]
    xdt = F.pad(x * dt[..., None], (0, 0, 0, 0, 0, pad))                 # [B, T', H, P]
    Bm, Cm = (F.pad(t, (0, 0, 0, 0, 0, pad)) for t in (Bm, Cm))
    n = (T + pad) // L
    a, xdt, Bm, Cm = (t.reshape(Bs, n, L, *t.shape[2:]) for t in (a, xdt, Bm, Cm))
    c = a.cumsum(2)                                                      # [B, n, L, H]
    lower = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()   # j <= i
    seg = c[:, :, :, None] - c[:, :, None, :]                            # [B, n, Li, Lj, H]
    decay = torch.where(lower[:, :, None], seg, float("-inf")).exp()
    scores = torch.einsum("bnihs,bnjhs->bnijh", Cm, Bm) * decay          # [B, n, Li, Lj, H]
    y = torch.einsum("bnijh,bnjhp->bnihp", scores, xdt)                  # [B, n, L, H, P]
    to_end = (c[:, :, -1:] - c).exp()                                    # [B, n, L, H]
    own = torch.einsum("bnjhp,bnjhs->bnhps", xdt * to_end[..., None], Bm)  # [B, n, H, P, N]
    whole = c[:, :, -1].exp()                                            # [B, n, H]
    entering = []
    for k in range(n):                                                   # across chunks
        entering.append(h)
        h = whole[:, k, :, None, None] * h + own[:, k]
    h0 = torch.stack(entering, dim=1)                                    # [B, n, H, P, N]
    y = y + torch.einsum("bnihs,bnhps->bnihp", Cm, h0) * c.exp()[..., None]
    return y.reshape(Bs, n * L, H, P)[:, :T], h
