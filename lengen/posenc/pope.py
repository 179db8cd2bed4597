"""PoPE (Gopalakrishnan et al. 2025): polar-coordinate RoPE, each q/k channel's magnitude from
content (softplus), its angle from position alone.

Paper: Gopalakrishnan, Csordás, Schmidhuber, Mozer, "Decoupling the What and Where With Polar
Coordinate Positional Embeddings", arXiv 2509.10534, Sec. 3.

Each of the hd channels c of a query at position i and a key at position j becomes a complex
number ``mu e^{i phi}``::

    mu_qc = softplus(q_c),   phi_qc = i * theta_c
    mu_kc = softplus(k_c),   phi_kc = j * theta_c + delta_hc
    score = Re(sum_c q~_c conj(k~_c)) = sum_c mu_qc mu_kc cos((i - j) theta_c - delta_hc)

with one frequency per channel, ``theta_c = base^(-c / hd)`` (c = 0 .. hd-1; RoPE has one per
channel pair), and an optional learned phase bias ``delta_hc`` per head and channel, clamped to
``[-2 pi, 0]`` (``posenc_kwargs.phase_bias``, default true, zero at init; ``bias_uniform_init``
draws it from U(-2 pi, 0) instead), as in x-transformers' ``PolarEmbedding``, against which
``tests/test_pope.py`` checks this module.

The ``rotate`` hook returns the real form ``[mu cos phi, mu sin phi]``: q and k come out TWICE as
wide as the head (2 hd) while v keeps hd, and their plain dot product is the score above. The
attention ops scale scores by 1/sqrt(width of q) = 1/sqrt(2 hd); ``rotate`` multiplies q by
sqrt(2) so that the score is scaled by the paper's (and x-transformers') 1/sqrt(hd). The kinds
that compute q.k (softmax, FoT, TRA, Diff and the newer ones) take the wider q/k; CoPE, whose
position table has the head's width, refuses it (``Attention.supports_wide_qk``). PoPE adds no
bias, so softmax attention keeps its SDPA path (SDPA allows a value width different from q's).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from lengen.checks import Bool, Float
from lengen.posenc.base import PositionalScheme


class PoPE(PositionalScheme):
    #: q and k leave ``rotate`` this many times as wide as the head (attention kinds that need
    #: q's width to equal the head's refuse such a scheme)
    qk_width_factor = 2
    KWARG_RULES = {"base": Float(gt=0), "phase_bias": Bool(), "bias_uniform_init": Bool()}

    def __init__(self, *, base: float = 10000.0, phase_bias: bool = True,
                 bias_uniform_init: bool = False, **kw):
        super().__init__(**kw)
        if bias_uniform_init and not phase_bias:
            raise ValueError("posenc_kwargs.bias_uniform_init=true needs phase_bias=true (it is "
                             "the initialisation of that bias)")
        self.base, self.bias_uniform_init = float(base), bool(bias_uniform_init)
        hd = self.head_dim
        self.register_buffer("inv_freq", base ** (-torch.arange(hd, dtype=torch.float32) / hd),
                             persistent=False)                              # [hd]
        # delta [H, hd]: the learned phase of the keys (None: no bias)
        self.phase = nn.Parameter(torch.zeros(self.n_heads, hd)) if phase_bias else None
        self.reset_parameters()

    def reset_parameters(self, init: str = "normal") -> None:
        if self.phase is None:
            return
        with torch.no_grad():
            if self.bias_uniform_init:
                self.phase.uniform_(-2 * math.pi, 0.0)
            else:
                self.phase.zero_()

    def angles(self, pos: torch.Tensor, dtype) -> torch.Tensor:
        """pos [T] -> [1, 1, T, hd]; [B, T] -> [B, 1, T, hd]: position x theta_c in ``dtype``
        (float32 at least)."""
        acc = torch.promote_types(dtype, torch.float32)
        ang = pos.to(acc)[..., None] * self.inv_freq.to(acc)                # [(B,) T, hd]
        return ang.unsqueeze(-3) if self.per_sequence(pos) else ang[None, None]

    def rotate(self, q, k, pos):
        """q, k [B, H, T, hd] -> [B, H, T, 2 hd]: [mu cos phi, mu sin phi] (q times sqrt 2)."""
        ang = self.angles(pos, q.dtype)                                     # [*, 1, T, hd]
        acc = ang.dtype
        mq, mk = F.softplus(q.to(acc)), F.softplus(k.to(acc))
        ang_k = ang
        if self.phase is not None:
            delta = self.phase.to(acc).clamp(-2 * math.pi, 0.0)             # [H, hd]
            ang_k = ang + delta[:, None, :]                                 # [*, H, T, hd]
        q2 = torch.cat([mq * ang.cos(), mq * ang.sin()], dim=-1) * math.sqrt(2.0)
        k2 = torch.cat([mk * ang_k.cos(), mk * ang_k.sin()], dim=-1)
        return q2.to(q.dtype), k2.to(k.dtype)
