"""Reading a fixed data set in epochs, each in a new order, with an exact-resume state.

A task with a fixed training set of N examples (the decoder papers use 100K) reads it one epoch
after another. Each epoch's order is a permutation drawn from the *training* generator at the
moment the epoch starts: one draw of a 62-bit seed, expanded into ``torch.randperm(N)`` by a
private generator. Keeping that seed (not the permutation) makes the state a few plain ints, so
``state_dict()`` is JSON-safe and a resumed run reads the same examples in the same order.

    reader = EpochReader(100_000)
    idx = reader.next_indices(64, generator)     # [64] example indices; may span two epochs
    reader.state_dict()                          # {'epoch': 1, 'index': 64, 'perm_seed': ...}
"""
from __future__ import annotations

import torch


class EpochReader:
    def __init__(self, size: int):
        if size < 1:
            raise ValueError(f"a data set to read in epochs needs >= 1 example, got {size}")
        self.size = size
        self.reset()

    def reset(self) -> None:
        """Back to before the first epoch."""
        self.epoch, self.index, self.perm_seed, self._perm = 0, 0, None, None

    def _permutation(self, seed: int) -> torch.Tensor:
        return torch.randperm(self.size, generator=torch.Generator().manual_seed(int(seed)))

    def _start_epoch(self, generator: torch.Generator) -> None:
        self.perm_seed = int(torch.randint(0, 2 ** 62, (1,), generator=generator))
        self._perm = self._permutation(self.perm_seed)
        self.epoch += 1
        self.index = 0

    def next_indices(self, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        """The next ``batch_size`` example indices [batch_size]. A batch that reaches the end of
        an epoch continues with the next one, so every example is read once per epoch."""
        out = []
        while batch_size > 0:
            if self._perm is None or self.index >= self.size:
                self._start_epoch(generator)
            take = min(batch_size, self.size - self.index)
            out.append(self._perm[self.index:self.index + take])
            self.index += take
            batch_size -= take
        return torch.cat(out)

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "index": self.index, "perm_seed": self.perm_seed}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.index = int(state["epoch"]), int(state["index"])
        self.perm_seed = state.get("perm_seed")
        self._perm = None if self.perm_seed is None else self._permutation(self.perm_seed)


__all__ = ["EpochReader"]
