"""Rows of a padded batch without its padding: the per-token layers run on the N tokens that
matter, attention on the padded [B, T] layout.

A causal decoder's output at position i depends on tokens 0..i only. When training scores a
row's tokens up to some position, the tokens after it (padding, mostly: the addition and copy
batches are about 40 % padding) change no scored output and no gradient, so the linear layers,
norms and MLP may skip them. :class:`Packing` maps between the padded layout [B, T, C] and the
packed one [N, C] (the kept tokens in row-major order); attention unpacks its q, k, v (zeros at
the skipped tokens, which no kept query can see) and packs its output again
(:meth:`lengen.attention.base.Attention.forward`). The padded computation is the reference
(tests/test_keep.py); the two agree to fp32 rounding.
"""
from __future__ import annotations

import torch


class Packing:
    """The tokens ``valid`` (bool [B, T]) marks, as indices into the flattened batch."""

    def __init__(self, valid: torch.Tensor):
        self.B, self.T = valid.shape
        self.valid = valid
        self.index = valid.flatten().nonzero().squeeze(1)            # [N]

    @property
    def n(self) -> int:
        return self.index.numel()

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, ...] -> [N, ...] (rows [B, T, C] or the token ids [B, T])."""
        return x.reshape(self.B * self.T, *x.shape[2:]).index_select(0, self.index)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """[N, C] -> [B, T, C], zeros at the tokens left out."""
        out = x.new_zeros(self.B * self.T, x.shape[-1])
        return out.index_copy(0, self.index, x).view(self.B, self.T, x.shape[-1])

    def rows_of(self, keep: torch.Tensor) -> torch.Tensor:
        """The packed rows (indices into [N]) of the tokens ``keep`` (bool [B, T], a subset of
        ``valid``) marks."""
        slot = self.valid.flatten().long().cumsum(0) - 1             # [B * T]: packed row
        return slot[keep.flatten()]


def needed_tokens(keep: torch.Tensor) -> torch.Tensor:
    """bool [B, T]: the tokens a causal model needs for the outputs ``keep`` marks, every
    position up to each row's last kept one (none in a row that keeps nothing)."""
    T = keep.shape[1]
    idx = torch.arange(T, device=keep.device)
    last = torch.where(keep, idx, -1).amax(1)                        # [B], -1: nothing kept
    return idx[None, :] <= last[:, None]


__all__ = ["Packing", "needed_tokens"]
