"""Chomsky R: is the number of unequal neighbouring pairs odd?

Even pairs; Deletang et al. 2023; Ruoss et al. 2023, Table 1.

Input: a uniform binary string of length ``n``. Output: one class, ``#{i : s_i != s_{i+1}} mod 2``
(0 = even, 1 = odd). Equivalently ``s_1 xor s_n``, which is why a model can solve it by looking at
the two ends only. Examples::

    001110   one '01', one '10'   -> 0
    0101001  three '01', two '10' -> 1

Ids: inputs 0, 1; output classes 0, 1 (tokens 2, 3); placeholder 4; vocab 5.
"""
from __future__ import annotations

import torch

from lengen.tasks.chomsky.base import ChomskyTask


class EvenPairs(ChomskyTask):
    name = "even_pairs"
    level = "regular"
    input_size = 2
    output_size = 2

    def sample(self, n, batch_size, generator):
        s = torch.randint(0, 2, (batch_size, n), generator=generator)
        unequal = (s[:, 1:] != s[:, :-1]).long().sum(1)
        return s, (unequal % 2)[:, None]
