"""Chomsky CS: write a binary string twice.

Duplicate string; Deletang et al. 2023; Ruoss et al. 2023, Table 1.

Input: a uniform string ``s_1 .. s_n`` over ``n_symbols`` symbols (2 in the papers). Output
(``2n`` positions): ``s_1 .. s_n s_1 .. s_n``. Example::

    101 -> 101101

Ids (``n_symbols = S``): inputs ``0..S-1``; output classes ``0..S-1`` (tokens ``S..2S-1``);
placeholder 2S; vocab 2S+1 (= 5 for binary strings).
"""
from __future__ import annotations

import torch

from lengen.tasks.chomsky.base import ChomskyTask


class DuplicateString(ChomskyTask):
    name = "duplicate_string"
    level = "cs"

    def __init__(self, n_symbols: int = 2, **kwargs):
        super().__init__(**kwargs)
        if n_symbols < 2:
            raise ValueError(f"n_symbols must be >= 2, got {n_symbols}")
        self.input_size = self.output_size = n_symbols

    def output_length(self, n):
        return 2 * n

    def sample(self, n, batch_size, generator):
        s = torch.randint(0, self.input_size, (batch_size, n), generator=generator)
        return s, torch.cat([s, s], 1)
