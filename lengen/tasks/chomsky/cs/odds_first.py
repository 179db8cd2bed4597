"""Chomsky CS: the symbols at odd indices, then those at even indices.

Odds first; Deletang et al. 2023; Ruoss et al. 2023, Table 1.

Input: a uniform string over ``n_symbols`` symbols (2 in the papers). With **0-based** indices
``s_0 s_1 .. s_{n-1}``, the output (``n`` positions) is ``s_1 s_3 s_5 .. s_0 s_2 s_4 ..``, which is
what the reference code computes. (The reference docstring describes the opposite order with
1-based indices, and its examples follow the docstring, not the code.) Examples::

    00110101 -> 0111 0100
    110      -> 1 10

Ids (``n_symbols = S``): inputs ``0..S-1``; output classes ``0..S-1`` (tokens ``S..2S-1``);
placeholder 2S; vocab 2S+1 (= 5 for binary strings).
"""
from __future__ import annotations

import torch

from lengen.tasks.chomsky.base import ChomskyTask


class OddsFirst(ChomskyTask):
    name = "odds_first"
    level = "cs"

    def __init__(self, n_symbols: int = 2, **kwargs):
        super().__init__(**kwargs)
        if n_symbols < 2:
            raise ValueError(f"n_symbols must be >= 2, got {n_symbols}")
        self.input_size = self.output_size = n_symbols

    def output_length(self, n):
        return n

    def sample(self, n, batch_size, generator):
        s = torch.randint(0, self.input_size, (batch_size, n), generator=generator)
        return s, torch.cat([s[:, 1::2], s[:, 0::2]], 1)
