"""Log-length query scaling, an option of every attention kind (``attention_kwargs.logn``).

Both forms multiply each query row by a factor that depends only on how many keys it sees, so
the scores q.k of any kind (softmax, FoT, TRA, CoPE, Diff, selective, stick-breaking, ...) are
scaled and attention does not flatten as the context grows. The factor is applied to q after the
positional scheme's ``rotate`` (one call in :meth:`lengen.attention.base.Attention.forward`).

* ``logn=ssmax``: Scalable-Softmax (Nakanishi 2025, "Scalable-Softmax Is Superior for
  Attention", the SSMax definition ``softmax((s log n) z)`` and its attention form
  ``a_n = softmax((s log n) q_n K^T / sqrt(d))``, Sec. 2-3): query row i is multiplied by
  ``s_h log n_i``, n_i = the number of keys the row sees (i + 1 in a decoder, counting cached
  keys; T in an encoder), with a learnable scalar ``s_h`` per head (``logn_learn_s=false``: a
  fixed constant). ``logn_s`` (default 0.43, the value the unofficial ``Scalable-Softmax``
  package gives as the paper's) is its initial value. The first row of a decoder sees one key,
  log 1 = 0, and attends to it with weight 1 as before.
* ``logn=llama4``: Llama 4's attention temperature tuning (Hugging Face ``transformers``
  ``models/llama4/modeling_llama4.py``, ``Llama4TextAttention.forward``): query row i (0-based
  token index, counting cached tokens) is multiplied by
  ``log(floor((i + 1) / floor_scale) + 1) * attn_scale + 1`` with ``logn_floor_scale`` (8192)
  and ``logn_attn_scale`` (0.1) as in Llama 4's config. Defined for decoders only. Llama 4 uses
  it on its NoPE layers; here it applies to every layer of the model it is set on.

Both count tokens (the row's index), not the sampled position values: a sampler that spreads
positions (randomized, interpolate) does not change the factor, as in the two references,
which read the token index.
"""
from __future__ import annotations

import math

import torch
from torch import nn

#: the values of ``attention_kwargs.logn``
LOGN_KINDS = ("none", "ssmax", "llama4")


class LogLengthScaling(nn.Module):
    """q [B, H, T, hd] -> q scaled per row; the identity for ``kind='none'`` (no parameters)."""

    def __init__(self, kind: str, *, n_heads: int, causal: bool, s: float = 0.43,
                 learn_s: bool = True, floor_scale: float = 8192.0, attn_scale: float = 0.1):
        super().__init__()
        if kind not in LOGN_KINDS:
            raise ValueError(f"unknown attention_kwargs.logn {kind!r}; valid: "
                             f"{', '.join(LOGN_KINDS)}")
        if kind == "llama4" and not causal:
            raise ValueError("attention_kwargs.logn=llama4 (Llama 4's temperature tuning) is "
                             "defined for decoders (it scales by the token index); use "
                             "logn=ssmax or none with model.causal=false")
        if not (isinstance(floor_scale, (int, float)) and floor_scale > 0):
            raise ValueError(f"attention_kwargs.logn_floor_scale must be > 0, got {floor_scale!r}")
        self.kind, self.causal = kind, causal
        self.floor_scale, self.attn_scale = float(floor_scale), float(attn_scale)
        if kind == "ssmax":
            init = torch.full((n_heads,), float(s))
            if learn_s:
                self.s = nn.Parameter(init)                      # [H], one per head
            else:
                self.register_buffer("s", init, persistent=False)

    def extra_repr(self) -> str:
        return f"kind={self.kind}"

    def factor(self, n_q: int, n_keys: int, dtype, device) -> torch.Tensor | None:
        """The per-row factor [H or 1, n_q, 1] for the last ``n_q`` of ``n_keys`` tokens (the
        new rows of a cached step sit after ``n_keys - n_q`` cached ones); None for ``none``."""
        if self.kind == "none":
            return None
        acc = torch.promote_types(dtype, torch.float32)
        idx = torch.arange(n_keys - n_q, n_keys, device=device, dtype=acc)   # token index i
        if self.kind == "llama4":
            f = torch.log1p(torch.floor((idx + 1.0) / self.floor_scale)) * self.attn_scale + 1.0
            return f[None, :, None]                                           # [1, n_q, 1]
        n = idx + 1.0 if self.causal else torch.full_like(idx, float(n_keys))  # keys seen
        return self.s.to(acc)[:, None, None] * torch.log(n)[None, :, None]    # [H, n_q, 1]

    def forward(self, q: torch.Tensor, key_pos: torch.Tensor) -> torch.Tensor:
        """q: [B, H, Tq, hd] (after ``rotate``), key_pos: the positions of every key ([Tk] or
        [B, Tk]; Tk = Tq outside cached decoding) -> q scaled row by row."""
        if self.kind == "none":
            return q
        f = self.factor(q.shape[-2], key_pos.shape[-1], q.dtype, q.device)
        return (q.to(f.dtype) * f).to(q.dtype)

