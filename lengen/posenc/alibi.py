"""ALiBi: attention with linear biases (Press et al. 2022).

Bias ``-m_h * |pos_i - pos_j|`` with head slopes ``m_h`` the geometric sequence of Press et al.:
for n heads a power of two, ``m_h = 2^(-8h/n)``, h = 1..n; otherwise the slopes of the nearest
lower power of two followed by every other slope of the next power of two (their reference code).
In a causal decoder only ``j <= i`` is visible so this is the paper's ``-m (i - j)``. For a
bidirectional encoder the Ruoss et al. variant ``m (-|i - j| + 0.5 [j < i])`` is available with
``encoder_asymmetric=True`` so left and right keys can be told apart.

``relative='difference'`` (default, the papers' reading) uses the positions' difference
``pos_i - pos_j``; ``relative='rank'`` uses ``d_|i-j|``, the sorted positions' offsets indexed by
the index distance (:func:`lengen.posenc.distance.rank_relative`): with the ``randomized``
sampler (``zero_first=true``) this is the public randomized-ALiBi code of Ruoss et al., which
samples sorted distances rather than positions. Both are the same with identity positions.
"""
from __future__ import annotations

import math

import torch

from lengen.posenc.base import PositionalScheme
from lengen.posenc.distance import rank_relative


def alibi_slopes(n_heads: int) -> torch.Tensor:
    def pow2(n):
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(n_heads).is_integer():
        s = pow2(n_heads)
    else:
        p = 2 ** math.floor(math.log2(n_heads))
        s = pow2(p) + pow2(2 * p)[0::2][: n_heads - p]
    return torch.tensor(s, dtype=torch.float32)


class ALiBi(PositionalScheme):
    has_bias = True

    RELATIVE = ("difference", "rank")

    def __init__(self, *, encoder_asymmetric: bool = False, relative: str = "difference", **kw):
        super().__init__(**kw)
        if relative not in self.RELATIVE:
            raise ValueError(f"unknown model.posenc_kwargs.relative '{relative}' for alibi. "
                             f"Valid: {', '.join(self.RELATIVE)}")
        self.encoder_asymmetric, self.relative = encoder_asymmetric, relative
        self.register_buffer("slopes", alibi_slopes(self.n_heads), persistent=False)

    def bias(self, pos_q, pos_k, q=None, k=None):
        if self.relative == "rank":
            rel = rank_relative(pos_q, pos_k).float()           # [(B,) Tq, Tk]
        else:
            rel = self.pairwise(pos_q, pos_k, torch.float32)    # [(B,) Tq, Tk] = i - j
        dist = -rel.abs()
        if self.encoder_asymmetric and not self.causal:
            dist = dist + 0.5 * (rel > 0).float()
        # [H, Tq, Tk] for shared positions, [B, H, Tq, Tk] for per-sequence ones
        return self.slopes[:, None, None] * dist.unsqueeze(-3)
