"""Sinusoidal absolute encodings (Vaswani et al. 2017), evaluated at arbitrary float positions.

``PE(p, 2i) = sin(p / base^(2i/D))``, ``PE(p, 2i+1) = cos(p / base^(2i/D))`` added to the token
embeddings. Defined for any position, so it never rejects a length (it may still not generalize).
Positions ``[T]`` give one ``[T, D]`` table broadcast over the batch; ``[B, T]`` one per sequence.
"""
from __future__ import annotations

import torch

from lengen.checks import Float
from lengen.posenc.base import PositionalScheme


class SinCos(PositionalScheme):
    KWARG_RULES = {"base": Float(gt=0)}

    def __init__(self, *, base: float = 10000.0, **kw):
        super().__init__(**kw)
        if self.d_model % 2:
            raise ValueError(f"sincos needs an even d_model, got {self.d_model}")
        inv = base ** (-torch.arange(0, self.d_model, 2, dtype=torch.float32) / self.d_model)
        self.register_buffer("inv_freq", inv, persistent=False)

    def embed(self, x, pos):
        ang = pos.float()[..., None] * self.inv_freq           # [T, D/2] or [B, T, D/2]
        pe = torch.stack([ang.sin(), ang.cos()], dim=-1).flatten(-2)  # [(B,) T, D] interleaved
        return x + pe.to(x.dtype)
