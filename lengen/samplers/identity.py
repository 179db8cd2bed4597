"""The ``identity`` sampler: positions ``0, 1, ..., T-1``, the usual convention."""
from __future__ import annotations

import torch

from lengen.samplers.base import PositionSampler


class IdentitySampler(PositionSampler):
    """Positions ``0, 1, ..., T-1`` at training and evaluation (the usual convention)."""

    integer_positions = True

    random_at_eval = False

    def sample(self, length, *, training, device=None, generator=None, batch_size=None,
               lengths=None, tokens=None):
        return torch.arange(length, device=device, dtype=torch.float32)

    def max_position(self, length):
        return float(max(length - 1, 0))

    def describe(self):
        return "identity: positions 0..T-1 at train and eval"
