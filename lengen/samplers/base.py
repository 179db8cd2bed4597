"""The position-sampler interface (:class:`PositionSampler`); see :mod:`lengen.positions` for what
samplers are and how training, evaluation and generation call them. Kept in its own module so
sampler modules (:mod:`lengen.samplers.interpolate`, :mod:`lengen.samplers.warp`) can subclass it
while :mod:`lengen.positions` imports them for its registry."""
from __future__ import annotations

import torch


class PositionSampler:
    """Makes the float positions tensor for sequences of length ``T``: ``[T]``, or ``[B, T]``
    from a per-instance sampler asked for ``batch_size=B``."""

    #: True when ``sample(..., batch_size=B)`` returns one row per sequence ([B, T])
    per_instance: bool = False
    #: True when ``sample(..., training=False)`` draws random numbers. Evaluation then draws
    #: positions per block of sequences from its own generator; samplers that are deterministic at
    #: evaluation set it False (a sampler that forgets is still evaluated correctly, only in
    #: smaller batches).
    random_at_eval: bool = True
    #: True when the positions depend on the batch (``lengths`` and/or ``tokens``)
    uses_batch: bool = False
    #: True when only the training positions read the rows' real ``lengths`` (the randomized
    #: sampler's per-row draws): the model hands the batch over in train mode only, and
    #: evaluation treats the sampler as one that does not read the batch
    uses_lengths_in_training: bool = False
    #: True when every position returned is an integer (train and eval): only such samplers can
    #: index a learned position table (a GPT-2 backbone, lengen.model.hf_backbone)
    integer_positions: bool = False

    def sample(self, length: int, *, training: bool, device=None, generator=None,
               batch_size: int | None = None, lengths: torch.Tensor | None = None,
               tokens: torch.Tensor | None = None) -> torch.Tensor:
        """-> positions ``[T]`` (or ``[B, T]`` for a per-sequence sampler given ``batch_size``).
        ``lengths`` [B] / ``tokens`` [B, T]: the batch, for batch-aware samplers (others ignore
        them)."""
        raise NotImplementedError

    def max_position(self, length: int) -> float:
        """Largest position this sampler can return for a length-``T`` input (train or eval).

        Used to reject impossible configs (e.g. a learned table too small) before training.
        """
        raise NotImplementedError

    def describe(self) -> str:
        return type(self).__name__


__all__ = ["PositionSampler"]
