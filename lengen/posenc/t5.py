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

from lengen.posenc.base import PositionalScheme


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
    has_bias = True

    def __init__(self, *, num_buckets: int = 32, max_distance: int = 128, **kw):
        super().__init__(**kw)
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.table = nn.Embedding(num_buckets, self.n_heads)
        nn.init.zeros_(self.table.weight)

    def bias(self, pos_q, pos_k, q=None, k=None):
        rel = (pos_k.float()[None, :] - pos_q.float()[:, None]).round().long()  # [Tq, Tk]
        b = relative_bucket(rel, bidirectional=not self.causal, num_buckets=self.num_buckets,
                            max_distance=self.max_distance)
        return self.table(b).permute(2, 0, 1)                 # [H, Tq, Tk]
