"""Learned absolute positional embeddings (APE; Vaswani et al. 2017, GPT-2).

A table of ``max_positions`` vectors added to the token embeddings. Positions beyond the table are
an error raised before training (``check_positions``), never silently clamped. Fractional
positions (e.g. from position interpolation) linearly interpolate between the two neighbouring rows.
Positions may be shared (``[T]``: one ``[T, D]`` lookup broadcast over the batch) or per sequence
(``[B, T]``: a ``[B, T, D]`` lookup).
With the ``label`` sampler (a sorted random subset of [0, L)) this is the label / randomized
learned encoding of Li & McClelland (2023) and Ruoss et al. (2023).
"""
from __future__ import annotations

import torch
from torch import nn

from lengen.checks import Float, Int
from lengen.posenc.base import PositionalScheme


class LearnedAbsolute(PositionalScheme):
    KWARG_RULES = {"max_positions": Int(min=1), "init_std": Float(min=0)}

    def __init__(self, *, max_positions: int = 1024, init_std: float = 0.02, **kw):
        super().__init__(**kw)
        self.max_positions, self.init_std = int(max_positions), float(init_std)
        self.table = nn.Parameter(torch.empty(self.max_positions, self.d_model))
        self.reset_parameters()

    def reset_parameters(self, init: str = "normal") -> None:
        """``normal``: N(0, init_std). ``haiku``: truncated normal with std 1 (+-2), the default
        of ``hk.Embed`` that Ruoss et al.'s learned (and randomized learned) encodings use."""
        if init == "haiku":
            nn.init.trunc_normal_(self.table, std=1.0, a=-2.0, b=2.0)
        else:
            nn.init.normal_(self.table, std=self.init_std)

    def check_positions(self, max_position: float) -> None:
        if max_position > self.max_positions - 1:
            raise ValueError(
                f"learned positional table has {self.max_positions} rows (positions 0.."
                f"{self.max_positions - 1}) but positions up to {max_position:g} are needed; "
                f"raise model.posenc_kwargs.max_positions or shorten the inputs")

    def embed(self, x, pos):
        if pos.numel() and float(pos.max()) > self.max_positions - 1:
            raise ValueError(f"position {float(pos.max()):g} beyond learned table of size {self.max_positions}")
        lo = pos.floor().long()                                # [(B,) T]
        frac = (pos - lo.to(pos.dtype)).unsqueeze(-1).to(x.dtype)  # [(B,) T, 1]
        hi = (lo + 1).clamp_max(self.max_positions - 1)
        emb = self.table[lo] * (1 - frac) + self.table[hi] * frac  # [(B,) T, D]
        return x + emb
