"""p-RoPE (Barbero et al., ICLR 2025): RoPE that keeps its highest frequencies and leaves the
channels of the lowest fraction unrotated.

Paper: "Round and Round We Go! What makes Rotary Positional Encodings useful?", Sec. 6 and its
``apply_p_rope`` listing.

Reading of the paper (its listing, and Gemma's ``rope_proportion`` / Hugging Face's
``proportional`` RoPE, which implement the same operator): ``p`` is the fraction of the hd/2
rotary frequencies that stay rotary. The first ``r = int(p * hd // 2)`` frequency pairs keep
RoPE's original frequencies ``theta_i = base^(-2i/hd)``, i < r, computed over the WHOLE head
dim (so they are exactly the highest r frequencies of plain RoPE); the remaining hd/2 - r pairs,
RoPE's lowest frequencies, get frequency 0 (an infinite wavelength): those channels are never
rotated and carry content only (the paper's "semantic channels"). p = 1 is RoPE, p = 0 is NoPE;
the paper trains p = 0.25 and 0.75 ("0.75-RoPE" rotates 75% of the frequencies and drops the
lowest 25%).

This is NOT ``rope`` with ``rotary_fraction``: that rotates the first ``fraction x hd`` channels
with frequencies re-spread as ``base^(-2i/d)`` over the rotated width d (Hugging Face's
``partial_rotary_factor`` of standard RoPE), which changes every kept frequency; p-RoPE keeps the
kept ones unchanged. The channel layout is RoPE's (pairs i and i + hd/2, GPT-NeoX / Llama).

Options (``model.posenc_kwargs``): ``p`` (default 0.75) in [0, 1]; ``base`` (default 10000).
"""
from __future__ import annotations

import torch

from lengen.checks import Float
from lengen.posenc.base import PositionalScheme
from lengen.posenc.rope import apply_rotary


class PRoPE(PositionalScheme):
    KWARG_RULES = {"p": Float(min=0, max=1), "base": Float(gt=0)}

    def __init__(self, *, p: float = 0.75, base: float = 10000.0, **kw):
        super().__init__(**kw)
        if not 0 <= p <= 1:
            raise ValueError(f"posenc_kwargs.p (the fraction of RoPE frequencies kept) must be "
                             f"in [0, 1], got {p}")
        if self.head_dim % 2:
            raise ValueError(f"prope needs an even head dim, got head_dim={self.head_dim} "
                             f"(d_model / n_heads); change d_model or n_heads")
        half = self.head_dim // 2
        self.p, self.base = float(p), float(base)
        self.kept = int(p * self.head_dim // 2)                 # rotary frequency pairs kept
        inv = base ** (-torch.arange(0, 2 * self.kept, 2, dtype=torch.float32) / self.head_dim)
        inv = torch.cat([inv, torch.zeros(half - self.kept)])   # [hd/2]: the lowest set to 0
        self.register_buffer("inv_freq", inv, persistent=False)

    def cos_sin(self, pos: torch.Tensor, dtype):
        """pos [T] -> cos, sin [T, hd]; pos [B, T] -> [B, 1, T, hd]."""
        ang = pos.float()[..., None] * self.inv_freq           # [(B,) T, hd/2]
        ang = torch.cat([ang, ang], dim=-1)                    # [(B,) T, hd]
        if self.per_sequence(pos):
            ang = ang.unsqueeze(1)                             # [B, 1, T, hd]
        return ang.cos().to(dtype), ang.sin().to(dtype)

    def rotate(self, q, k, pos):
        if self.kept == 0:
            return q, k
        cos, sin = self.cos_sin(pos, q.dtype)
        return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
