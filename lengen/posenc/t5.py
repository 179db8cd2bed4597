"""T5 relative position bias (Raffel et al. 2020): the TRA paper's REL baseline.

A learned scalar per head and per *bucket* of relative distance ``i - j``. Half the buckets hold
exact small distances, the rest grow logarithmically up to ``max_distance``; every distance beyond
``max_distance`` shares the largest bucket's value, so out-of-distribution distances all get the
same learned bias (the failure mode the TRA paper discusses). Causal models use one-sided buckets;
bidirectional ones split the buckets between the two sides. Fractional relative positions are
rounded to the nearest integer before bucketing.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from lengen.checks import Int
from lengen.posenc.base import PositionalScheme
from lengen.posenc.distance import integer_progression, progression_distances, toeplitz


def relative_bucket(rel: torch.Tensor, *, bidirectional: bool, num_buckets: int, max_distance: int):
    """rel = j - i (key minus query), integer tensor -> bucket ids in [0, num_buckets)."""
    out = torch.zeros_like(rel)
    n = -rel                                              # distance looking back: i - j
    if bidirectional:
        num_buckets //= 2
        out = out + (n < 0).long() * num_buckets          # keys to the right use the upper half
        n = n.abs()
    else:
        n = n.clamp_min(0)
    max_exact = num_buckets // 2
    is_small = n < max_exact
    large = max_exact + (
        torch.log(n.float().clamp_min(1) / max_exact) / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)).long()
    large = large.clamp_max(num_buckets - 1)
    return out + torch.where(is_small, n, large)


class T5Bias(PositionalScheme):
    """T5 relative position bias (Raffel et al. 2020): one learned scalar per head and distance bucket.

    The bias of pair (i, j) depends only on the rounded relative distance, so ``bias`` buckets
    each *distinct* distance once and expands the per-distance values ``[H, n_dist]`` to
    ``[H, Tq, Tk]``: a Toeplitz view (``unfold``) when positions step evenly by an integer, a
    gather otherwise. The table lookup then touches n_dist rows instead of Tq * Tk (its backward
    was the cost: an embedding backward over Tq * Tk indices), and the expansion's backward is a
    sum over diagonals / a scatter-add of the [H, Tq, Tk] gradient. Values and gradients are those
    of looking every pair up (``_reference_bias``).

    Per-sequence positions (``[B, T]`` for either side) return ``[B, H, Tq, Tk]``. The Toeplitz
    view needs one shared progression, so they always take the gather path over a
    ``[B, Tq, Tk]`` distance index (exact: the same table entries, fallback stated here), or the
    pairwise lookup when their distances spread wider than the pairs."""

    KWARG_RULES = {"num_buckets": Int(min=2), "max_distance": Int(min=1)}

    has_bias = True
    #: the general (non-progression) path caches its [Tq, Tk] distance index for the last
    #: positions seen (every layer of one step reuses it) when it has at most this many entries
    cache_max_entries = 1 << 20

    def __init__(self, *, num_buckets: int = 32, max_distance: int = 128, **kw):
        super().__init__(**kw)
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.table = nn.Embedding(num_buckets, self.n_heads)
        self.reset_parameters()
        self._index_cache = None          # (pos_q copy, pos_k copy, index [Tq, Tk], r_min, n)

    def reset_parameters(self, init: str = "normal") -> None:
        """The bias table starts at zero (the model starts as NoPE and learns every bucket from
        there), whatever the model's generic init: re-run after it, which used to overwrite the
        table with N(0, 0.02)."""
        nn.init.zeros_(self.table.weight)

    def _buckets(self, rel: torch.Tensor) -> torch.Tensor:
        return relative_bucket(rel, bidirectional=not self.causal, num_buckets=self.num_buckets,
                               max_distance=self.max_distance)

    @staticmethod
    def _rounded_distance(pos_q, pos_k):
        """Rounded pos_k[j] - pos_q[i]: [Tq, Tk] long, or [B, Tq, Tk] for [B, T] positions."""
        return (pos_k.float().unsqueeze(-2) - pos_q.float().unsqueeze(-1)).round().long()

    def _reference_bias(self, pos_q, pos_k):
        """The pairwise definition: bucket every (i, j) and look each up -> [(B,) H, Tq, Tk]."""
        rel = self._rounded_distance(pos_q, pos_k)                 # [(B,) Tq, Tk]
        return self.table(self._buckets(rel)).movedim(-1, -3)

    def bias(self, pos_q, pos_k, q=None, k=None):
        Tq, Tk = pos_q.shape[-1], pos_k.shape[-1]
        if Tq == 0 or Tk == 0:
            return self._reference_bias(pos_q, pos_k)
        prog = integer_progression(pos_q, pos_k)
        if prog is not None:
            # pos_k[j] - pos_q[i] = off + step (j - i), exactly (integers below 2^23 in float32)
            rel = progression_distances(*prog, Tq, Tk, device=pos_q.device)  # m = Tq - 1 - i + j
            vec = self.table(self._buckets(rel)).t()                         # [H, Tq + Tk - 1]
            return toeplitz(vec, Tq, Tk)                                     # [H, Tq, Tk]
        idx, r_min, n = self._distance_index(pos_q, pos_k)
        if idx is None:                        # distances spread wider than the pairs: bucket pairs
            return self._reference_bias(pos_q, pos_k)
        rel = torch.arange(r_min, r_min + n, device=pos_q.device)
        vec = self.table(self._buckets(rel)).t()                             # [H, n]
        H = vec.shape[0]
        out = vec.gather(1, idx.reshape(1, -1).expand(H, -1)).view(H, *idx.shape)
        return out.movedim(0, -3)                          # [H, Tq, Tk] or [B, H, Tq, Tk]

    def _distance_index(self, pos_q, pos_k):
        """-> (rounded distance - r_min as [(B,) Tq, Tk] long, r_min, number of distances), or
        (None, 0, 0) when there are more distinct distance values than pairs."""
        c = self._index_cache
        if (c is not None and c[0].shape == pos_q.shape and c[1].shape == pos_k.shape
                and c[0].device == pos_q.device and c[0].dtype == pos_q.dtype
                and c[1].dtype == pos_k.dtype
                and torch.equal(c[0], pos_q) and torch.equal(c[1], pos_k)):
            return c[2:]
        rel = self._rounded_distance(pos_q, pos_k)                       # [(B,) Tq, Tk]
        r_min, r_max = int(rel.min()), int(rel.max())
        n = r_max - r_min + 1
        out = (rel - r_min, r_min, n) if n <= rel.numel() else (None, 0, 0)
        if rel.numel() <= self.cache_max_entries:
            self._index_cache = (pos_q.detach().clone(), pos_k.detach().clone()) + out
        else:
            self._index_cache = None
        return out
