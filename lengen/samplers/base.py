"""The position-sampler interface (:class:`PositionSampler`): positions are data.

Every positional scheme in :mod:`lengen.posenc` reads an explicit, possibly fractional, positions
tensor instead of assuming ``arange(T)``: ``[T]`` (shared by every sequence of the batch) or
``[B, T]`` (one row per sequence). A *position sampler* makes that tensor.
Randomized positions (Ruoss et al. 2023), label encodings (Li & McClelland 2023), position
interpolation and head/tail index warping are all samplers, so they compose with every scheme
instead of being re-implemented inside each one.

At training one sample is drawn per batch (shared by all sequences of the batch), as in the public
reference code of Ruoss et al. (the randomized sampler's ``train_draw='row'`` draws one per row,
sized to the row, for batches of mixed lengths); at evaluation one per block of evaluation
sequences. Each sampler states what it does at training and at evaluation time.

Random draws come from the ``generator`` passed in (torch's global RNG only when none is given):
training draws from its own generator saved in every checkpoint, and evaluation draws once per
block of sequences from a generator derived from (eval seed, split, block), so evaluated numbers
never depend on the evaluation batch size and evaluation never moves the training RNG (see
:mod:`lengen.eval.evaluate`). ``random_at_eval`` tells evaluation whether a sampler draws at all
in eval mode.

Per-instance samplers (e.g. warping the positions of some sequences only) set ``per_instance =
True`` and return ``[B, T]`` when ``batch_size`` is given; the others return one ``[T]`` draw
whatever ``batch_size`` is.

Batch-aware samplers (``uses_batch = True``) also read the batch: ``lengths`` ([B], the real,
unpadded length of each row: position interpolation per test length, warping ``l f(j / l)`` with
the instance's own l) and/or ``tokens`` ([B, T]: positions computed from the token structure,
e.g. digits of equal significance sharing a position). Training and evaluation hand both over
(:meth:`lengen.tasks.base.Batch.lengths`); ``generate`` hands over the lengths it will reach
(prompt + max_new_tokens) and no tokens. A batch-aware sampler must be deterministic at
evaluation (``random_at_eval = False``): its evaluation positions are computed batch by batch
from the rows, so a random draw there would depend on the batch size. A sampler that reads the
lengths in training only sets ``uses_lengths_in_training = True`` instead: the model hands it the
batch in train mode, and evaluation draws it per block like any random sampler.

Samplers that need something only the task knows (position interpolation needs M, the longest
training length; coupling / Abacus the digit ids) fill it in from a classmethod
``task_defaults(kwargs, task, splits) -> kwargs`` (``splits``: every split the run evaluates),
which a config calls before building the sampler (the filled-in values are saved with the run).
Positional schemes take the same hook (RoPE scaling's original length).

To add a sampler: subclass :class:`PositionSampler`, implement ``sample`` and ``max_position``,
put it in a module of its own in :mod:`lengen.samplers` (one per sampler, or per family sharing a
base: :mod:`~lengen.samplers.digits`), and add one line to ``SAMPLERS`` in
:mod:`lengen.samplers`.
"""
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
