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

from lengen.tasks.chomsky.base import StringTransduction


class DuplicateString(StringTransduction):
    name = "duplicate_string"
    level = "cs"

    def output_length(self, n):
        return 2 * n

    def transform(self, s):
        return torch.cat([s, s], 1)
