"""Chomsky R: final state of a walk on a cycle of 5 states.

Deletang et al. 2023; Ruoss et al. 2023, Table 1 (permutation-invariant).

Input: ``n`` uniform actions; token 0 = step left (-1), 1 = stay (0), 2 = step right (+1). The walk
starts at state 0. Output: one class, the final state ``sum(token - 1) mod 5``. Examples (tokens,
then the moves they stand for)::

    2 0 1 0 0   (+1 -1 0 -1 -1)  -> -2 mod 5 = 3
    2 2 2 0     (+1 +1 +1 -1)    -> 2

Ids: inputs 0, 1, 2; output classes 0..4 (tokens 3..7); placeholder 8; vocab 9.
"""
from __future__ import annotations

import torch

from lengen.tasks.chomsky.base import ChomskyTask


class CycleNavigation(ChomskyTask):
    name = "cycle_navigation"
    level = "regular"
    input_size = 3
    output_size = 5

    def sample(self, n, batch_size, generator):
        a = torch.randint(0, 3, (batch_size, n), generator=generator)
        return a, ((a - 1).sum(1) % self.output_size)[:, None]
