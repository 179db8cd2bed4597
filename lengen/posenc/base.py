"""The positional-scheme interface: at most three hooks, called the same way by every attention kind.

* ``embed(x, pos)``        -- add to token embeddings at layer 0 (learned, sin/cos)
* ``rotate(q, k, pos)``    -- rotate queries and keys in every layer (RoPE)
* ``bias(pos_q, pos_k, q, k)`` -- additive attention-logit bias ``[H, Tq, Tk]`` or
  ``[B, H, Tq, Tk]`` (ALiBi, T5, FIRE, ...; Transformer-XL's terms also read q and k)

plus one optional speed hook, ``tiled_bias(pos, q, k)``: the same bias of a whole self-attention
square in a form the tiled CPU training ops evaluate tile by tile (:mod:`lengen.ops.tile_bias`;
Transformer-XL), or None.

A scheme overrides only the hooks it needs; the defaults do nothing. Attention modules never ask
which scheme is active, so a new scheme is one new file, one registry line and its tests.
Positions are float tensors made by a :mod:`lengen.samplers` sampler: ``[T]`` (shared by the
batch) or ``[B, T]`` (one row per sequence). Every hook accepts both; a bias hook returns
``[H, Tq, Tk]`` when both position tensors are ``[T]``-shaped and ``[B, H, Tq, Tk]`` when either
is per sequence, and ``[B, T]`` with equal rows gives the ``[T]`` values.

Hooks receive ``causal`` via the scheme's constructor (``causal=True`` for decoders), because some
schemes (ALiBi, T5 buckets) are defined differently for bidirectional encoders.

One scheme instance serves every layer by default (the model hands the same module to each block).
A scheme with learned bias parameters may set ``supports_per_layer``; then
``posenc_kwargs.per_layer=true`` makes the model build one instance per layer (each with its own
parameters; the first also serves the ``embed`` hook), e.g. FIRE, which Zhou et al. (2024) share
across layers, or KerpleLog, whose public code learns one per layer.
"""
from __future__ import annotations

import math

import torch
from torch import nn


def positive_kwarg(scheme: str, name: str, value, why: str, example: str) -> float:
    """``value`` as a float if it is a finite number > 0; else a ValueError naming
    ``posenc_kwargs.<name>``, why it must be positive and an example (for schemes built directly,
    outside a config's ``KWARG_RULES`` check)."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        v = float("nan")
    if isinstance(value, bool) or not math.isfinite(v) or v <= 0:
        raise ValueError(f"{scheme}: posenc_kwargs.{name} must be a finite number > 0 ({why}), "
                         f"got {value!r}; use e.g. {name}={example}")
    return v


class PositionalScheme(nn.Module):
    #: True when ``bias`` returns a tensor; lets softmax attention keep the bias-free SDPA path.
    has_bias: bool = False
    #: True when giving each layer its own instance is meaningful (learned bias parameters)
    supports_per_layer: bool = False
    #: how many times the head's width ``rotate`` makes q and k (PoPE: 2); attention kinds that
    #: need head-wide q/k refuse a factor above 1 (lengen.attention.wide_qk_refusal)
    qk_width_factor: int = 1

    def __init__(self, *, d_model: int, n_heads: int, head_dim: int, causal: bool = True,
                 per_layer: bool = False):
        super().__init__()
        if not isinstance(per_layer, bool):
            raise ValueError(f"posenc_kwargs.per_layer must be true or false, got {per_layer!r}")
        if per_layer and not self.supports_per_layer:
            raise ValueError(f"posenc_kwargs.per_layer: '{type(self).__name__}' has no learned "
                             f"bias a layer could own; remove per_layer (valid for schemes that "
                             f"set supports_per_layer, e.g. fire, kerple_log)")
        self.d_model, self.n_heads, self.head_dim, self.causal = d_model, n_heads, head_dim, causal
        #: the model builds one instance of this scheme per layer when set
        self.per_layer = per_layer

    @property
    def adds_embedding(self) -> bool:
        """True when the scheme overrides the ``embed`` hook (adds to the token embeddings)."""
        return type(self).embed is not PositionalScheme.embed

    def reset_parameters(self, init: str = "normal") -> None:
        """The scheme's own initialisation, run by the model AFTER its generic init (which would
        otherwise overwrite tables held in ``nn.Linear`` / ``nn.Embedding``). ``init`` is the
        model's scheme (``model.init``: ``normal`` or ``haiku``). Default: nothing to do."""

    # -- hooks ---------------------------------------------------------------------------------
    def embed(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """x: [B, T, D], pos: [T] or [B, T] -> [B, T, D]."""
        return x

    def rotate(self, q: torch.Tensor, k: torch.Tensor, pos: torch.Tensor):
        """q, k: [B, H, T, hd], pos: [T] or [B, T] -> rotated (q, k)."""
        return q, k

    def bias(self, pos_q: torch.Tensor, pos_k: torch.Tensor, q: torch.Tensor | None = None,
             k: torch.Tensor | None = None) -> torch.Tensor | None:
        """pos_q: [Tq] or [B, Tq], pos_k: [Tk] or [B, Tk], q: [B, H, Tq, hd], k: [B, H, Tk, hd]
        (after ``rotate``) -> additive logit bias [H, Tq, Tk] (both positions shared) or
        [B, H, Tq, Tk] (or None). Most schemes ignore q, k."""
        return None

    def tiled_bias(self, pos: torch.Tensor, q: torch.Tensor, k: torch.Tensor):
        """Optional: ``bias(pos, pos, q, k)`` of a whole self-attention square as a
        :class:`lengen.ops.tile_bias.RelativeBias` (per-query vectors scored against a table of
        relative distances, plus a per-key column) or a :class:`lengen.ops.tile_bias.LowRankBias`
        (a per-query factor times constant key features), which the tiled CPU training ops evaluate
        tile by tile instead of reading a [B, H, T, T] tensor; None (the default) when the scheme
        or these positions have no such form. Must equal ``bias`` (values and gradients)."""
        return None

    # -- helpers -------------------------------------------------------------------------------
    @staticmethod
    def pairwise(pos_q: torch.Tensor, pos_k: torch.Tensor, dtype=None) -> torch.Tensor:
        """pos_q - pos_k over all pairs: [Tq, Tk] for shared positions, [B, Tq, Tk] when either
        is [B, T] (the other broadcasts over the batch)."""
        if dtype is not None:
            pos_q, pos_k = pos_q.to(dtype), pos_k.to(dtype)
        return pos_q.unsqueeze(-1) - pos_k.unsqueeze(-2)

    @staticmethod
    def per_sequence(pos: torch.Tensor) -> bool:
        """True for [B, T] positions, False for shared [T] ones (anything else is an error)."""
        if pos.dim() not in (1, 2):
            raise ValueError(f"positions must be [T] or [B, T], got shape {tuple(pos.shape)}")
        return pos.dim() == 2

    # -- validation ----------------------------------------------------------------------------
    def check_positions(self, max_position: float) -> None:
        """Raise ValueError if positions up to ``max_position`` cannot be encoded."""
