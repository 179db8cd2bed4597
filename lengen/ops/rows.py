"""The rows a training forward leaves out or shares, planned once per forward: :class:`RowPlan`.

Three savings, each exact up to fp32 rounding against the batch-sized forward
(tests/test_keep.py, tests/test_token_rows.py):

* ``pack`` (every block): a causal model needs no token after a row's last kept one, so when
  those are at least ``1 - PACK_SHARE`` of the batch the blocks run on the needed tokens only,
  ``[N, D]`` (:class:`lengen.ops.packing.Packing`); attention unpacks around its maths.
* ``tokens`` (the first block): its input as one row per vocabulary entry
  (:class:`lengen.ops.token_rows.TokenRows`), so its norm and attention's q, k, v projection run
  once per entry.
* ``keep`` and ``rows`` (the last block): the output is the kept rows only, ``[K, D]`` (``keep``,
  indices into the blocks' rows flattened), selected before attention's output projection, and
  attention may skip the query rows that are not read (``rows``, bool ``[B, T]``).

The model builds the plan (:meth:`lengen.model.transformer.Transformer.row_plan`); each block
takes its part, :meth:`RowPlan.layer`, and hands its attention the part the kind declares it
handles itself, :meth:`RowPlan.handled_by` (class flags ``supports_packing``,
``supports_token_rows``, ``supports_keep``, ``supports_query_rows``); the block does the rest
around it (:meth:`lengen.model.block.Block.mix`).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from lengen.ops.packing import Packing, needed_tokens
from lengen.ops.token_rows import TokenRows

#: a causal batch whose needed tokens are at most this share of it runs packed (lengen.ops.packing)
PACK_SHARE = 0.9


def plan_rows(keep: torch.Tensor, causal: bool):
    """(packing or None, the kept tokens' row indices [K] in the blocks' layout): a causal
    model needs no token after a row's last kept one, so when those are at least
    1 - PACK_SHARE of the batch, the blocks run on the needed tokens only."""
    if causal:
        needed = needed_tokens(keep)                             # [B, T]
        if needed.float().mean() <= PACK_SHARE:
            pack = Packing(needed)
            return pack, pack.rows_of(keep)
    return None, keep.flatten().nonzero().squeeze(1)


@dataclass(frozen=True)
class RowPlan:
    """What a forward leaves out or shares; all None: nothing (the batch-sized forward).

    ``pack``: the blocks' rows are the needed tokens, [N, D] (every block). ``tokens``: the
    first block's input as a table (the block maps its norm over it and hands it to attention
    in place of x). ``keep`` (int [K]): the rows the last block returns.
    ``rows`` (bool [B, T]): the query rows whose outputs the last block reads. ``n_layers``:
    the blocks the plan spans (a block's part, :meth:`layer`, spans one)."""

    pack: Packing | None = None
    tokens: TokenRows | None = None
    keep: torch.Tensor | None = None
    rows: torch.Tensor | None = None
    n_layers: int = 1

    def layer(self, i: int) -> "RowPlan":
        """Block ``i``'s part: packing in every block, token rows in the first, kept and query
        rows in the last."""
        first, last = i == 0, i == self.n_layers - 1
        if (first or self.tokens is None) and (last or self.keep is self.rows is None):
            return self
        return RowPlan(pack=self.pack, tokens=self.tokens if first else None,
                       keep=self.keep if last else None, rows=self.rows if last else None)

    def handled_by(self, kind) -> "RowPlan":
        """The part an attention kind (class or module) does itself, as its flags declare; the
        block does the rest around it. Token rows and kept rows go only to a kind that also takes
        the packing (a table cannot be padded; kept rows index the packed layout)."""
        if (kind.supports_packing and kind.supports_token_rows and kind.supports_keep
                and kind.supports_query_rows):
            return self
        packs = self.pack is None or kind.supports_packing    # else its rows are [B, T]
        return RowPlan(pack=self.pack if kind.supports_packing else None,
                       tokens=self.tokens if packs and kind.supports_token_rows else None,
                       keep=self.keep if packs and kind.supports_keep else None,
                       rows=self.rows if kind.supports_query_rows else None)

    def packed(self, h: torch.Tensor) -> torch.Tensor:
        """``h`` [B, T, C] as the blocks' rows: the needed tokens [N, C] (h itself without
        ``pack``)."""
        return h if self.pack is None else self.pack.pack(h)

    def kept(self, h: torch.Tensor) -> torch.Tensor:
        """``h``'s kept rows, [K, C] (h itself without ``keep``)."""
        if self.keep is None:
            return h
        return h.reshape(-1, h.shape[-1]).index_select(0, self.keep)


#: the plan that leaves nothing out (evaluation, cached decoding, a direct attention call)
NO_ROWS = RowPlan()

__all__ = ["NO_ROWS", "PACK_SHARE", "RowPlan", "plan_rows"]
