"""Chomsky R: is the number of 1s odd?

Parity check; Deletang et al. 2023; Ruoss et al. 2023, Table 1 (permutation-invariant, so
solvable without positional information).

Input: a uniform binary string of length ``n``. Output: one class, ``#1s mod 2``. Examples::

    1010100  three 1s -> 1
    01111    four 1s  -> 0

Ids: inputs 0, 1; output classes 0, 1 (tokens 2, 3); placeholder 4; vocab 5.
"""
from __future__ import annotations

import torch

from lengen.tasks.chomsky.base import ChomskyTask


class ParityCheck(ChomskyTask):
    name = "parity_check"
    level = "regular"
    input_size = 2
    output_size = 2

    def sample(self, n, batch_size, generator):
        s = torch.randint(0, 2, (batch_size, n), generator=generator)
        return s, (s.sum(1) % 2)[:, None]
