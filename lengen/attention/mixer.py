"""Token mixers: recurrent and linear-recurrent layers that take an attention kind's place in a
block (``model.attention=lstm | mamba2 | gated_deltanet``) and read no positional scheme.

A mixer is called like an attention kind, ``forward(x, pos, posenc, *, plan=, cache=,
key_pos=) -> [B, T, D]`` with x ``[B, T, D]``, and ignores ``pos``, ``posenc`` and ``plan``:
order comes from the recurrence itself. Its class says it handles none of the model's row plan
(:class:`TokenMixer`'s ``supports_*`` flags, all False), so the block unpacks packed rows around
it, takes kept rows from its output and hands it x rather than a token table
(:meth:`lengen.model.block.Block.mix`), and config validation refuses a positional
scheme that acts inside attention (:func:`lengen.model.config.pair_refusal`): only schemes
that add to the embeddings (``learned``, ``sincos``) or do nothing (``nope``) combine with one.

Cached decoding keeps the recurrent state instead of keys and values: :meth:`TokenMixer.forward`
with a :class:`lengen.model.cache.LayerCache` reads the state the previous call left under the
mixer's names (``cache.get``), runs the new tokens from it and stores the state after them
(``cache.put``), so a step costs O(1) in the tokens before it.

Paths (``impl``, as for attention kinds): ``naive`` runs the reference, a step-by-step recurrence
written from the paper's equations; ``lean`` and ``auto`` run the fast path, tested equal to the
reference (values and gradients, fp64): ``torch.nn.LSTM`` for the LSTM, the chunked algorithms
(quadratic within a chunk of ``block_size`` tokens at most 64, recurrent across chunks, memory
linear in T) for Mamba-2 and Gated DeltaNet.
"""
from __future__ import annotations

import torch
from torch import nn

from lengen.attention.base import IMPLS

#: the longest chunk of the chunked mixers (model.attn_block_size caps it further)
MAX_CHUNK = 64


class TokenMixer(nn.Module):
    """Base class of the token mixers (see the module docstring). Subclasses implement
    :meth:`mix` (the whole sequence from a given state) and name their state in
    :attr:`state_names`."""

    #: what of the model's row plan (lengen.ops.rows.RowPlan) it handles itself: none, so
    #: the block (lengen.model.block.Block.mix) hands it x as [B, T, D] rows (unpacked, not a
    #: token table), takes the kept rows from its output and gives it an empty plan
    supports_packing = supports_token_rows = supports_keep = supports_query_rows = False
    #: takes no q and k at all (a scheme that widens them, PoPE, is refused as acting inside
    #: attention: lengen.model.config.pair_refusal)
    supports_wide_qk = False
    #: reads no positional scheme (validation refuses schemes that rotate q/k or add a bias)
    uses_posenc = False
    #: derived, never set (as on lengen.attention.base.Attention): no queries and keys
    is_token_mixer = not uses_posenc
    #: a causal recurrence: there is no encoder form
    requires_causal = True
    reads_x = True
    #: names of the tensors kept in a LayerCache between decoding calls (set by subclasses)
    state_names: tuple[str, ...] = ()

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.is_token_mixer = not cls.uses_posenc     # derived again for every subclass

    def __init__(self, *, d_model: int, n_heads: int, causal: bool = True, impl: str = "auto",
                 block_size: int = 256, layer_idx: int = 0, n_layers: int = 1):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        if impl not in IMPLS:
            raise ValueError(f"unknown attention impl '{impl}'. Valid: {', '.join(IMPLS)}")
        if not causal:
            raise ValueError(f"mixer '{type(self).__name__}' is a causal recurrence, defined only "
                             f"for causal (decoder) models")
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, d_model // n_heads
        self.causal, self.impl, self.block_size = causal, impl, block_size
        self.layer_idx, self.n_layers = layer_idx, n_layers
        self.last_weights: torch.Tensor | None = None   # a mixer has no attention weights
        self.record_weights = False

    def use_lean(self) -> bool:
        """Whether the fast / memory-lean path runs (every impl but ``naive``)."""
        return self.impl != "naive"

    @property
    def chunk(self) -> int:
        """Chunk length of the chunked paths: model.attn_block_size, at most MAX_CHUNK."""
        return max(1, min(self.block_size, MAX_CHUNK))

    def forward(self, x: torch.Tensor, pos=None, posenc=None, *, plan=None, cache=None,
                key_pos: torch.Tensor | None = None) -> torch.Tensor:
        """x: [B, T, D] -> [B, T, D]; ``pos``, ``posenc`` and ``plan`` are ignored. With
        ``cache`` (a :class:`lengen.model.cache.LayerCache`) x holds the new tokens only and the
        recurrence starts from the state the cache holds (zeros on the first call)."""
        if cache is None:
            y, _ = self.mix(x, None)
            return y
        state = {name: cache.get(name) for name in self.state_names}
        have = all(v is not None for v in state.values())
        if key_pos is not None:
            before = key_pos.shape[-1] - x.shape[1]           # tokens cached before this call
            if have != (before > 0):
                raise ValueError(f"layer cache {'holds' if have else 'lacks'} a recurrent state "
                                 f"but the positions say {before} tokens came before; use one "
                                 f"cache per sequence batch, fed every step")
        y, new = self.mix(x, state if have else None)
        for name in self.state_names:
            cache.put(name, new[name])
        return y

    def mix(self, x: torch.Tensor, state: dict | None):
        """(y [B, T, D], the state after the last token as {name: tensor [B, ...]}) from x
        [B, T, D] and the state before it (None: the initial state)."""
        raise NotImplementedError

    def reset_parameters(self) -> None:
        """Mixer-specific initialisation, run after the model's generic init (override)."""

    @staticmethod
    def compute_dtype(x: torch.Tensor) -> torch.dtype:
        """The recurrences run in fp32 at least (fp64 stays fp64; bf16 / fp16 go up)."""
        return torch.promote_types(x.dtype, torch.float32)
