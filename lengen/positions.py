"""Position samplers: positions are data.

Every positional scheme in :mod:`lengen.posenc` reads an explicit, possibly fractional, positions
tensor of shape ``[T]`` instead of assuming ``arange(T)``. A *position sampler* makes that tensor.
Randomized positions (Ruoss et al. 2023), label encodings (Li & McClelland 2023), position
interpolation and head/tail index warping are all samplers, so they compose with every scheme
instead of being re-implemented inside each one.

One sample is drawn per batch (shared by all sequences of the batch), as in the public reference
code of Ruoss et al. Each sampler states what it does at training and at evaluation time.

To add a sampler: subclass :class:`PositionSampler`, implement ``sample`` and ``max_position``,
and add one line to ``SAMPLERS``.
"""
from __future__ import annotations

import torch


class PositionSampler:
    """Makes the ``[T]`` float positions tensor for a sequence of length ``T``."""

    def sample(self, length: int, *, training: bool, device=None, generator=None) -> torch.Tensor:
        raise NotImplementedError

    def max_position(self, length: int) -> float:
        """Largest position this sampler can return for a length-``T`` input (train or eval).

        Used to reject impossible configs (e.g. a learned table too small) before training.
        """
        raise NotImplementedError

    def describe(self) -> str:
        return type(self).__name__


class IdentitySampler(PositionSampler):
    """Positions ``0, 1, ..., T-1`` at training and evaluation (the usual convention)."""

    def sample(self, length, *, training, device=None, generator=None):
        return torch.arange(length, device=device, dtype=torch.float32)

    def max_position(self, length):
        return float(max(length - 1, 0))

    def describe(self):
        return "identity: positions 0..T-1 at train and eval"


# Literal registry: the CLI name is the key. Later samplers (randomized, label, interpolate,
# warp) plug in here.
SAMPLERS: dict[str, type[PositionSampler]] = {
    "identity": IdentitySampler,
}


def build_sampler(name: str, **kwargs) -> PositionSampler:
    from lengen.registry import lookup

    return lookup(SAMPLERS, name, "position sampler")(**kwargs)
