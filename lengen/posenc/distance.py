"""Helpers for bias schemes whose bias is a function of the two positions of a pair (KerpleLog,
FIRE, T5, Transformer-XL): sorting out shared ``[T]`` vs per-sequence ``[B, T]`` positions, and,
for evenly stepped positions, their distances along the Toeplitz index and the Toeplitz expansion
of per-distance values.

Shapes follow the hook contract (:mod:`lengen.posenc.base`): positions are ``[T]`` (shared by the
batch) or ``[B, T]`` (one row per sequence); a bias is ``[H, Tq, Tk]`` for shared positions and
``[B, H, Tq, Tk]`` for per-sequence ones.
"""
from __future__ import annotations

import torch


def split_positions(pos_q: torch.Tensor, pos_k: torch.Tensor):
    """Sort out the positions a bias hook received -> ``(pq, pk, B)``:

    * ``pq [Tq], pk [Tk], None``: shared by the batch; the bias is ``[H, Tq, Tk]``.
    * ``pq [Tq], pk [Tk], B``: ``[B, T]`` positions whose rows are all equal; the caller computes
      the shared bias and expands it with :func:`expand_batch`, so equal rows give exactly the
      ``[T]`` result (same arithmetic, not merely close).
    * ``pq [B, Tq], pk [B, Tk], B``: per-sequence positions; the bias is ``[B, H, Tq, Tk]``.

    A ``[T]`` tensor paired with a ``[B, T]`` one is shared by every row.
    """
    if pos_q.dim() not in (1, 2) or pos_k.dim() not in (1, 2):
        raise ValueError(f"positions must be [T] or [B, T], got query positions of shape "
                         f"{tuple(pos_q.shape)} and key positions of shape {tuple(pos_k.shape)}")
    if pos_q.dim() == 1 and pos_k.dim() == 1:
        return pos_q, pos_k, None
    B = pos_q.shape[0] if pos_q.dim() == 2 else pos_k.shape[0]
    if (pos_q.dim() == 2 and pos_k.dim() == 2) and pos_q.shape[0] != pos_k.shape[0]:
        raise ValueError(f"query and key positions have different batch sizes: "
                         f"{tuple(pos_q.shape)} vs {tuple(pos_k.shape)}")
    rows_equal = all(p.dim() == 1 or p.shape[0] == 0 or bool((p == p[:1]).all())
                     for p in (pos_q, pos_k))
    if rows_equal and B > 0:
        first = [p if p.dim() == 1 else p[0] for p in (pos_q, pos_k)]
        return first[0], first[1], B
    pq = pos_q if pos_q.dim() == 2 else pos_q.expand(B, -1)
    pk = pos_k if pos_k.dim() == 2 else pos_k.expand(B, -1)
    return pq, pk, B


def expand_batch(bias: torch.Tensor, B: int | None) -> torch.Tensor:
    """A shared ``[H, Tq, Tk]`` bias as ``[B, H, Tq, Tk]`` (a stride-0 view) when ``B`` is given."""
    return bias if B is None else bias.unsqueeze(0).expand(B, *bias.shape)


def integer_progression(pos_q: torch.Tensor, pos_k: torch.Tensor):
    """(off, step) with pos_k[j] - pos_q[i] = off + step * (j - i) when both position vectors step
    by the same nonzero integer from integer starts (identity sampler, shifted or not) and are
    small enough (< 2^23) that float32 differences are exact; else None. Per-sequence ([B, T])
    positions always give None: the fast paths built on a progression need one shared by the
    batch, and their callers fall back to exact general paths."""
    if pos_q.dim() != 1 or pos_k.dim() != 1 or pos_q.is_complex() or pos_k.is_complex():
        return None
    Tq, Tk = pos_q.numel(), pos_k.numel()
    pq, pk = pos_q.detach().double(), pos_k.detach().double()
    if Tq > 1:
        step = float(pq[1] - pq[0])
    elif Tk > 1:
        step = float(pk[1] - pk[0])
    else:
        step = 1.0
    a, b = float(pq[0]), float(pk[0])
    if step == 0 or step != round(step) or a != round(a) or b != round(b):
        return None
    lim = float(1 << 23)
    if max(abs(a), abs(b), abs(a + step * (Tq - 1)), abs(b + step * (Tk - 1))) >= lim:
        return None
    for p, start, n in ((pq, a, Tq), (pk, b, Tk)):
        if n > 1 and not torch.equal(p, start + step * torch.arange(n, dtype=torch.float64,
                                                                     device=p.device)):
            return None
    return int(b - a), int(step)


def progression_distances(off: int, step: int, Tq: int, Tk: int, *, device=None,
                          dtype=torch.long) -> torch.Tensor:
    """Key-minus-query distances ``pos_k[j] - pos_q[i] = off + step (j - i)`` of an
    :func:`integer_progression` along the Toeplitz index ``m = Tq - 1 - i + j``: ``[Tq + Tk - 1]``
    (the layout :func:`toeplitz` expands)."""
    m = torch.arange(Tq + Tk - 1, device=device, dtype=dtype)
    return off + step * (m - (Tq - 1))


def toeplitz(vec: torch.Tensor, Tq: int, Tk: int) -> torch.Tensor:
    """``vec [..., Tq + Tk - 1]`` holding the value of key offset ``j - i = m - (Tq - 1)`` at index
    ``m`` -> ``[..., Tq, Tk]`` with entry ``(i, j) = vec[..., Tq - 1 - i + j]``.

    ``unfold`` makes the Hankel view (row s = ``vec[s : s + Tk]``); flipping the rows turns it
    into the Toeplitz matrix. Its backward sums the ``[.., Tq, Tk]`` gradient along diagonals."""
    return vec.unfold(-1, Tk, 1).flip(-2)


def integral_positions(*pos: torch.Tensor, limit: float = float(1 << 23)) -> bool:
    """True when every position is an integer of magnitude below ``limit`` (2^23: differences of
    such float32 values are exact, so the distances are exactly the integers they should be)."""
    for p in pos:
        if p.numel() == 0:
            continue
        if p.is_complex() or not bool((p == p.round()).all()) or float(p.abs().max()) >= limit:
            return False
    return True


def rank_relative(pos_q: torch.Tensor, pos_k: torch.Tensor) -> torch.Tensor:
    """The reference code's randomized relative distances (Ruoss et al.'s public
    ``noisy_relative`` / ``noisy_alibi``): the pair (i, j) of sequence INDICES gets
    ``sign(i - j) * d_|i-j|`` with ``d_k = pos[k] - pos[0]`` the k-th sorted position's offset from
    the first (the sampler's sorted draw plays the sorted random distances; identity positions give
    ``d_k = k``, i.e. ordinary relative positions). Contrast: the paper's reading is
    ``pos_i - pos_j``, the difference of the two tokens' sampled positions.

    The key positions must be the whole (causal: prefix) sequence, strictly increasing; a query's
    index is found by its position among them. -> float64 ``[Tq, Tk]`` or ``[B, Tq, Tk]``."""
    pq, pk = pos_q.double(), pos_k.double()
    if pk.shape[-1] > 1 and not bool((pk[..., 1:] > pk[..., :-1]).all()):
        raise ValueError("relative='rank' needs strictly increasing positions (a sorted sampler "
                         "such as identity or randomized with sort=true)")
    if pq.dim() == 2 and pk.dim() == 1:
        pk = pk.expand(pq.shape[0], -1)
    if pk.dim() == 2 and pq.dim() == 1:
        pq = pq.expand(pk.shape[0], -1)
    i = torch.searchsorted(pk.contiguous(), pq.contiguous())            # [(B,) Tq]
    Tk = pk.shape[-1]
    if bool((i >= Tk).any()) or not bool((pk.gather(-1, i.clamp_max(Tk - 1)) == pq).all()):
        raise ValueError("relative='rank' needs every query position among the key positions")
    j = torch.arange(Tk, device=pk.device)
    gap = i[..., :, None] - j                                          # [(B,) Tq, Tk] = i - j
    d = pk - pk[..., :1]                                               # [(B,) Tk] offsets
    dist = d.gather(-1, gap.abs().flatten(-2)).view(gap.shape) if d.dim() == 2 else d[gap.abs()]
    return torch.sign(gap).double() * dist
