"""The task interface: a task makes batches of (inputs, targets, masks) for a split.

A *split* is a named evaluation condition: ``iid`` / ``sparse`` / ``dense`` for flip-flop, or a
length such as ``len=100`` for length-generalization tasks. Training batches come from
``train_batch``. Every batch is fully determined by the ``torch.Generator`` passed in, so a fixed
seed gives identical batches and a saved generator state resumes the exact data stream. A task
with state of its own (a curriculum, a file cursor) returns it from ``state_dict`` so training
checkpoints restore it too.

Evaluation data is a function of (evaluation seed, split, sequence index) only: ``eval_batches``
generates fixed blocks of ``EVAL_BLOCK`` sequences, block ``b`` from a generator seeded by
``block_seed(seed, split, b)``, and cuts the requested sequences into batches. The batch size
only decides how many sequences go through the model at once, never which ones.

Targets are aligned with model outputs: ``logits[:, t]`` is scored against ``targets[:, t]``
where ``loss_mask`` (training loss) or ``eval_mask`` (accuracy) is true. Decoder tasks shift by
one inside the task; encoder tasks put their targets at the output placeholder positions.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

from lengen.checks import did_you_mean
from lengen.errors import ArgumentError

#: sequences per evaluation block (data, and randomized evaluation positions, are drawn per block)
EVAL_BLOCK = 64


def block_seed(seed: int, split: str, block: int, stream: str = "data") -> int:
    """A 63-bit generator seed for block ``block`` of ``split`` under evaluation seed ``seed``.
    A stable hash (SHA-256, not Python's salted ``hash``), so it is the same in every process;
    ``stream`` separates independent draws of one block (data, positions)."""
    digest = hashlib.sha256(f"{int(seed)}/{split}/{int(block)}/{stream}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


@dataclass
class Batch:
    inputs: torch.Tensor       # [B, T] int64 model input
    targets: torch.Tensor      # [B, T] int64 (ignored where masks are false)
    loss_mask: torch.Tensor    # [B, T] bool: positions that enter the loss
    eval_mask: torch.Tensor    # [B, T] bool: positions scored for accuracy

    def to(self, device):
        return Batch(*(t.to(device) for t in (self.inputs, self.targets, self.loss_mask, self.eval_mask)))

    def __len__(self) -> int:
        return self.inputs.shape[0]

    def lengths(self) -> torch.Tensor:
        """[B] real (unpadded) length of every row: one past its last scored position (loss or
        eval mask). Right-padded decoder tasks end each row's scoring at its EOS target, so pads
        are excluded; tasks scoring the last position (flip-flop, encoder placeholders, text)
        give T. Batch-aware position samplers read it."""
        scored = self.loss_mask | self.eval_mask                      # [B, T]
        T = scored.shape[1]
        last = T - 1 - scored.flip(1).int().argmax(1)                 # index of the last True
        return torch.where(scored.any(1), last + 1, torch.full_like(last, T))

    def rows(self, start: int, stop: int) -> "Batch":
        """Sequences ``start .. stop-1`` of the batch."""
        return Batch(*(t[start:stop] for t in (self.inputs, self.targets, self.loss_mask,
                                                self.eval_mask)))

    @staticmethod
    def cat(batches: list["Batch"]) -> "Batch":
        if len(batches) == 1:
            return batches[0]
        return Batch(*(torch.cat([getattr(b, f) for b in batches]) for f in
                       ("inputs", "targets", "loss_mask", "eval_mask")))


def check_eval_sizes(n_sequences, batch_size, seed=0) -> None:
    """Evaluation sizes must be positive integers (a zero batch size would never finish) and the
    seed an integer (the contract: data is a function of seed, split and index)."""
    for name, v in (("n_sequences", n_sequences), ("batch_size", batch_size)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ArgumentError(f"evaluation {name} must be an integer >= 1, got {v!r} "
                                f"(eval.sequences / eval.batch_size in a config)")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ArgumentError(f"the evaluation seed must be an integer >= 0 (eval.seed), got "
                            f"{seed!r}; eval_batches takes an int seed, not a torch.Generator")


def reads_with(task, causal: bool) -> bool:
    """Whether a model with ``model.causal=causal`` may train on and be scored on ``task``: the
    task's own kind, or a causal model on an encoder task whose answers sit after the whole
    input (``causal_ok``: the Chomsky tasks, as the papers' RNN baselines read them). An
    encoder on a decoder task would see the answer it is scored on."""
    return causal == task.causal or (causal and getattr(task, "causal_ok", False) is True)


class Task:
    name: str = "task"
    vocab_size: int
    #: True for tasks read by a causal decoder (next-token prediction)
    causal: bool = True

    def train_batch(self, batch_size: int, generator: torch.Generator) -> Batch:
        raise NotImplementedError

    def eval_batch(self, split: str, batch_size: int, generator: torch.Generator) -> Batch:
        raise NotImplementedError

    def eval_batches(self, split: str, n_sequences: int, batch_size: int, seed: int):
        """Yield batches of at most ``batch_size`` holding sequences ``0 .. n_sequences-1`` of
        ``split`` in order. Sequence ``i`` is row ``i % EVAL_BLOCK`` of block ``i // EVAL_BLOCK``,
        always generated whole from its own generator (``block_seed``), so it does not depend on
        ``batch_size`` or ``n_sequences``. Consecutive blocks are joined into one batch when their
        sequences have the same length."""
        check_eval_sizes(n_sequences, batch_size, seed)
        self.check_split(split)
        pending: list[Batch] = []
        n_pending = 0
        for block in range(-(-n_sequences // EVAL_BLOCK)):
            gen = torch.Generator().manual_seed(block_seed(seed, split, block))
            rows = self.eval_batch(split, EVAL_BLOCK, gen)
            rows = rows.rows(0, min(EVAL_BLOCK, n_sequences - block * EVAL_BLOCK))
            if pending and pending[0].inputs.shape[1] != rows.inputs.shape[1]:
                yield Batch.cat(pending)          # another length: never pad inside a batch
                pending, n_pending = [], 0
            start = 0
            while start < len(rows):
                take = min(batch_size - n_pending, len(rows) - start)
                pending.append(rows.rows(start, start + take))
                n_pending += take
                start += take
                if n_pending == batch_size:
                    yield Batch.cat(pending)
                    pending, n_pending = [], 0
        if pending:
            yield Batch.cat(pending)

    def state_dict(self) -> dict:
        """State the task keeps between training batches (saved in checkpoints); tensors,
        numbers, strings and containers of them only. Stateless tasks return ``{}``."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore what ``state_dict`` returned (no-op for stateless tasks)."""

    def splits(self) -> list[str]:
        """Default evaluation splits, in display order."""
        raise NotImplementedError

    def max_input_length(self, splits: list[str] | None = None) -> int:
        """Longest model input of training and of the given splits (for config validation)."""
        raise NotImplementedError

    def train_input_length(self) -> int | None:
        """Longest model input (tokens) of the training data, or None when the task cannot say
        (position interpolation reads it as M, the longest training length)."""
        return None

    def check_split(self, split: str) -> None:
        if split not in self.splits():
            hint = (" To evaluate several splits give a list, e.g. eval.splits=[iid,sparse] or "
                    "--splits iid sparse." if isinstance(split, str) and "," in split else "")
            raise ValueError(f"unknown split '{split}' for task {self.name}. "
                             f"Valid splits: {', '.join(self.splits())}.{hint}"
                             f"{did_you_mean(split, self.splits()) if not hint else ''}")


def task_train_length(task) -> int | None:
    """The longest training model input of ``task`` in tokens, or None when it does not say (also
    for a task that does not subclass :class:`Task` and has no ``train_input_length``). Read by
    position interpolation (M) and RoPE scaling (the original length) to fill in their defaults."""
    fn = getattr(task, "train_input_length", None)
    return None if fn is None else fn()
