"""Rows that depend on the token alone: a table with one row per vocabulary entry, and the ids
that pick each row of the batch from it.

When a model adds no absolute positions to its token embeddings and draws no dropout on them,
its first block's input row is a function of the token id alone: a batch of B x T tokens holds
at most V distinct rows (flip-flop: 8 against 4064). Whatever acts on each row alone (the
block's norm, the attention's q, k, v projection) can then run once per vocabulary entry, and
the results are gathered into the batch: V / (B T) of the work, the same values up to fp32
rounding (a matrix product over V rows may add in another order than one over B T rows). The
gather's backward sums each row's gradient into its table row (``index_select``'s
``index_add``), so the parameters get the same gradient as through the batch.

:class:`lengen.model.transformer.Transformer` decides when a batch takes this path (CPU
training, no position added to the embeddings, no embedding dropout drawn, at most half as many
vocabulary entries as rows) and puts a :class:`TokenRows` in its row plan
(:class:`lengen.ops.rows.RowPlan`) for the first block, which maps its norm over the table and
hands it to attention in place of x; :meth:`lengen.attention.base.Attention.forward` projects
it. The batch-sized
computation is the reference (tests/test_token_rows.py).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch

#: ``LENGEN_TOKEN_ROWS=0`` turns the path off (every row computed in the batch, as before)
SWITCH = "LENGEN_TOKEN_ROWS"


def enabled() -> bool:
    """Whether the switch leaves the path on (read at each call, as the other fast paths')."""
    return os.environ.get(SWITCH, "1") != "0"


@dataclass(frozen=True)
class TokenRows:
    """``table[ids]`` without making it: ``table`` [V, C], ``ids`` int64 of any shape (the
    batch's token ids [B, T], or [N] for packed rows)."""

    table: torch.Tensor
    ids: torch.Tensor

    @property
    def shape(self) -> tuple:
        """The shape of the rows it stands for: ``(*ids.shape, C)``."""
        return (*self.ids.shape, self.table.shape[-1])

    def map(self, fn) -> "TokenRows":
        """``fn`` of every row, computed once per table row; ``fn`` must act on each row alone
        (a norm, a linear layer), never across rows."""
        return TokenRows(fn(self.table), self.ids)

    def full(self) -> torch.Tensor:
        """The rows themselves, ``[*ids.shape, C]``."""
        rows = self.table.index_select(0, self.ids.reshape(-1))        # [B * T, C]
        return rows.view(self.shape)


__all__ = ["SWITCH", "TokenRows", "enabled"]
