"""Rotary position embedding (RoPE; Su et al. 2021).

Rotates each pair of query/key channels by angle ``pos * base^(-2i/hd)``, so the score q_i.k_j
depends only on ``pos_i - pos_j``. Pairs are the two halves of the head (the GPT-NeoX / Llama
layout). Head dims must be even; fractional positions are allowed (position interpolation), shared
``[T]`` or per sequence ``[B, T]`` (each row rotates its own sequence's q and k).
"""
from __future__ import annotations

import torch

from lengen.checks import Float
from lengen.posenc.base import PositionalScheme


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [B, H, T, hd]; cos/sin: [T, hd] or [B, 1, T, hd]."""
    return x * cos + rotate_half(x) * sin


class RoPE(PositionalScheme):
    KWARG_RULES = {"base": Float(gt=0)}

    def __init__(self, *, base: float = 10000.0, **kw):
        super().__init__(**kw)
        if self.head_dim % 2:
            raise ValueError(f"rope needs an even head dim, got head_dim={self.head_dim} "
                             f"(d_model / n_heads); change d_model or n_heads")
        inv = base ** (-torch.arange(0, self.head_dim, 2, dtype=torch.float32) / self.head_dim)
        self.register_buffer("inv_freq", inv, persistent=False)

    def cos_sin(self, pos: torch.Tensor, dtype):
        """pos [T] -> cos, sin [T, hd]; pos [B, T] -> [B, 1, T, hd] (broadcast over heads)."""
        ang = pos.float()[..., None] * self.inv_freq           # [(B,) T, hd/2]
        ang = torch.cat([ang, ang], dim=-1)                    # [(B,) T, hd]
        if self.per_sequence(pos):
            ang = ang.unsqueeze(1)                             # [B, 1, T, hd]
        return ang.cos().to(dtype), ang.sin().to(dtype)

    def rotate(self, q, k, pos):
        cos, sin = self.cos_sin(pos, q.dtype)
        return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
