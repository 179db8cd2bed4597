"""The task interface: a task makes batches of (inputs, targets, masks) for a split.

A *split* is a named evaluation condition: ``iid`` / ``sparse`` / ``dense`` for flip-flop, or a
length such as ``len=100`` for length-generalization tasks. Training batches come from
``train_batch``. Every batch is fully determined by the ``torch.Generator`` passed in, so a fixed
seed gives identical batches and a saved generator state resumes the exact data stream.

Targets are aligned with model outputs: ``logits[:, t]`` is scored against ``targets[:, t]``
where ``loss_mask`` (training loss) or ``eval_mask`` (accuracy) is true. Decoder tasks shift by
one inside the task; encoder tasks put their targets at the output placeholder positions.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Batch:
    inputs: torch.Tensor       # [B, T] int64 model input
    targets: torch.Tensor      # [B, T] int64 (ignored where masks are false)
    loss_mask: torch.Tensor    # [B, T] bool: positions that enter the loss
    eval_mask: torch.Tensor    # [B, T] bool: positions scored for accuracy

    def to(self, device):
        return Batch(*(t.to(device) for t in (self.inputs, self.targets, self.loss_mask, self.eval_mask)))


class Task:
    name: str = "task"
    vocab_size: int
    #: True for tasks read by a causal decoder (next-token prediction)
    causal: bool = True

    def train_batch(self, batch_size: int, generator: torch.Generator) -> Batch:
        raise NotImplementedError

    def eval_batch(self, split: str, batch_size: int, generator: torch.Generator) -> Batch:
        raise NotImplementedError

    def eval_batches(self, split: str, n_sequences: int, batch_size: int, generator: torch.Generator):
        """Yield batches totalling ``n_sequences`` sequences of ``split``."""
        done = 0
        while done < n_sequences:
            b = min(batch_size, n_sequences - done)
            yield self.eval_batch(split, b, generator)
            done += b

    def splits(self) -> list[str]:
        """Default evaluation splits, in display order."""
        raise NotImplementedError

    def max_input_length(self, splits: list[str] | None = None) -> int:
        """Longest model input of training and of the given splits (for config validation)."""
        raise NotImplementedError

    def check_split(self, split: str) -> None:
        if split not in self.splits():
            raise ValueError(f"unknown split '{split}' for task {self.name}. "
                             f"Valid splits: {', '.join(self.splits())}")
