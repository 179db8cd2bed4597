"""Shared plumbing of the 15 Chomsky-hierarchy tasks (Deletang et al. 2023, "Neural Networks and
the Chomsky Hierarchy"; Ruoss et al. 2023, "Randomized Positional Encodings Boost Length
Generalization of Transformers").

Every task is read by a bidirectional *encoder*: the model input is the task input followed by
``output_length(n)`` placeholder tokens, and the answer is read from the logits at the placeholder
positions (no autoregressive decoding). For an input of length ``n`` the batch looks like::

    position   0 .. L-1              L .. L+K-1          (L = input_length(n), K = output_length(n))
    inputs     input symbols         PLACEHOLDER x K
    targets    PLACEHOLDER (ignored) output_offset + output class
    loss_mask  False                 True                 (the reference's unmasked cross-entropy)
    eval_mask  False                 True, or True up to and including the first terminator

Token layout (one token space shared by the embedding and the output head)::

    [0, input_size)                              input symbols, the reference's input ids
    [input_size, input_size + output_size)       output classes (class c -> input_size + c)
    input_size + output_size                     the placeholder
    vocab_size = input_size + output_size + 1

Input and output ids are kept disjoint, as the reference keeps separate one-hot input and output
spaces. ``output_slice`` says where the output classes live; training loss and evaluation use it
(``lengen.eval.metrics.restrict_to_outputs``) so that, as in the reference, cross-entropy and
argmax range over the output classes only.

Protocol (as in both papers): one length per batch, training length uniform in ``1..N``
(``max_train_length``, default 40); evaluation splits ``len=N+1`` ... ``len=M`` (``M`` =
``max_eval_length``, default 500). Any ``len=K`` with ``K >= 1`` is accepted by ``eval_batch`` even
if it is not a default split. (The reference's range evaluation starts at N+2 by an off-by-one;
our default splits start at N+1 as the paper states.)

Subclasses implement :meth:`ChomskyTask.sample` (task-local ids: inputs in ``[0, input_size)``,
outputs in ``[0, output_size)``) and, where they differ from the defaults, ``input_length`` and
``output_length``. Sampling is tensor code driven by the ``torch.Generator`` only, so a seed fixes
the batch.
"""
from __future__ import annotations

import torch

from lengen.tasks.base import Batch, Task
from lengen.tasks.splits import parse_split, split_name


def randint_below(high: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Uniform integers in ``[0, high)`` with a different ``high`` per element (``high >= 1``)."""
    u = torch.rand(high.shape, dtype=torch.float64, generator=generator)
    return torch.minimum((u * high).long(), high - 1)


class ChomskyTask(Task):
    """Base class: placeholders, masks, length sampling and ``len=K`` splits (see module doc)."""

    causal = False
    #: a causal model may be trained on it too: the answer is read at placeholders after the
    #: whole input, as the papers' RNN baselines (and the token mixers, model.attention=lstm,
    #: mamba2, gated_deltanet, which are causal only) read it (model.causal=true)
    causal_ok = True
    #: the per-length metric of the papers' length sweeps (per-token accuracy over the outputs)
    score_metric = "token_acc"
    #: Chomsky level of the task: "regular", "dcf" (deterministic context-free) or "cs"
    level: str = ""
    #: number of input symbols / output classes (task-local ids)
    input_size: int = 2
    output_size: int = 2
    #: output class that terminates the answer; accuracy ignores everything after its first
    #: occurrence (stack manipulation, binary addition, binary multiplication)
    terminator: int | None = None

    def __init__(self, max_train_length: int = 40, max_eval_length: int = 500):
        if max_train_length < 1:
            raise ValueError(f"max_train_length must be >= 1, got {max_train_length}")
        if max_eval_length <= max_train_length:
            raise ValueError(f"max_eval_length ({max_eval_length}) must exceed max_train_length "
                             f"({max_train_length}): the default splits are the unseen lengths "
                             "max_train_length+1 .. max_eval_length")
        self.max_train_length = max_train_length
        self.max_eval_length = max_eval_length

    # ---- token layout ---------------------------------------------------------------------
    @property
    def output_offset(self) -> int:
        return self.input_size

    @property
    def placeholder(self) -> int:
        return self.input_size + self.output_size

    @property
    def vocab_size(self) -> int:
        return self.input_size + self.output_size + 1

    @property
    def output_slice(self) -> slice:
        """Where the output classes sit in the vocabulary (for a restricted argmax)."""
        return slice(self.output_offset, self.output_offset + self.output_size)

    # ---- task definition (subclasses) -------------------------------------------------------
    def input_length(self, n: int) -> int:
        """Number of input tokens a batch of length ``n`` has (``n`` unless a task says so)."""
        return n

    def output_length(self, n: int) -> int:
        """Number of output placeholders for input length ``n``."""
        return 1

    def sample(self, n: int, batch_size: int, generator: torch.Generator):
        """-> (inputs [B, input_length(n)], outputs [B, output_length(n)]), task-local int64 ids."""
        raise NotImplementedError

    def accuracy_mask(self, outputs: torch.Tensor) -> torch.Tensor:
        """[B, K] bool over output positions: all of them, or (for terminated tasks) positions up
        to and including the first terminator."""
        if self.terminator is None:
            return torch.ones_like(outputs, dtype=torch.bool)
        is_end = outputs == self.terminator
        seen_before = (is_end.long().cumsum(1) - is_end.long()) > 0
        return ~seen_before

    # ---- batches ----------------------------------------------------------------------------
    def batch_for_length(self, n: int, batch_size: int, generator: torch.Generator) -> Batch:
        if n < 1:
            raise ValueError(f"input length must be >= 1, got {n}")
        x, y = self.sample(n, batch_size, generator)
        B, L = x.shape
        K = y.shape[1]
        assert (L, K) == (self.input_length(n), self.output_length(n)), (self.name, n, L, K)
        T = L + K
        inputs = torch.full((B, T), self.placeholder, dtype=torch.long)
        inputs[:, :L] = x
        targets = torch.full((B, T), self.placeholder, dtype=torch.long)
        targets[:, L:] = y + self.output_offset
        loss_mask = torch.zeros(B, T, dtype=torch.bool)
        loss_mask[:, L:] = True
        eval_mask = torch.zeros(B, T, dtype=torch.bool)
        eval_mask[:, L:] = self.accuracy_mask(y)
        return Batch(inputs, targets, loss_mask, eval_mask)

    def sample_train_length(self, generator: torch.Generator) -> int:
        return int(torch.randint(1, self.max_train_length + 1, (1,), generator=generator))

    def train_batch(self, batch_size: int, generator: torch.Generator) -> Batch:
        return self.batch_for_length(self.sample_train_length(generator), batch_size, generator)

    def eval_batch(self, split: str, batch_size: int, generator: torch.Generator) -> Batch:
        return self.batch_for_length(parse_split(split), batch_size, generator)

    def splits(self) -> list[str]:
        return [split_name(k) for k in range(self.max_train_length + 1, self.max_eval_length + 1)]

    def train_lengths(self) -> tuple[int, int]:
        """The training range of input lengths (inclusive), shaded in accuracy-vs-length plots."""
        return 1, self.max_train_length

    def check_split(self, split: str) -> None:
        parse_split(split)

    def model_length(self, n: int) -> int:
        """Model input length (task tokens + placeholders) for input length ``n``."""
        return self.input_length(n) + self.output_length(n)

    def train_input_length(self) -> int:
        """Longest training model input (task tokens + placeholders) in tokens."""
        return max(self.model_length(n) for n in range(1, self.max_train_length + 1))

    def max_input_length(self, splits: list[str] | None = None) -> int:
        lengths = [parse_split(s) for s in (self.splits() if splits is None else splits)]
        lengths += range(1, self.max_train_length + 1)
        return max(self.model_length(n) for n in lengths)


class StringTransduction(ChomskyTask):
    """A task that maps a uniform random string over ``n_symbols`` symbols to a string over the
    same symbols (reverse, duplicate, odds first, bucket sort): subclasses give
    :meth:`output_length` and :meth:`transform`."""

    def __init__(self, n_symbols: int = 2, **kwargs):
        super().__init__(**kwargs)
        if n_symbols < 2:
            raise ValueError(f"n_symbols must be >= 2, got {n_symbols}")
        self.input_size = self.output_size = n_symbols

    def transform(self, s: torch.Tensor) -> torch.Tensor:
        """[B, n] input strings -> [B, output_length(n)] outputs (task-local ids)."""
        raise NotImplementedError

    def sample(self, n, batch_size, generator):
        s = torch.randint(0, self.input_size, (batch_size, n), generator=generator)
        return s, self.transform(s)
