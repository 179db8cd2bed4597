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

from lengen.tasks.chomsky.base import StringTransduction


class OddsFirst(StringTransduction):
    name = "odds_first"
    level = "cs"

    def output_length(self, n):
        return n

    def transform(self, s):
        return torch.cat([s[:, 1::2], s[:, 0::2]], 1)
