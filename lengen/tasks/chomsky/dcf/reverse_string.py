"""Chomsky DCF: reverse a binary string.

Reverse string; Deletang et al. 2023; Ruoss et al. 2023, Table 1.

Input: a uniform string ``s_1 .. s_n`` over ``n_symbols`` symbols (2 in the papers). Output
(``n`` positions): ``s_n .. s_1``. Example::

    011010 -> 010110

Ids (``n_symbols = S``): inputs ``0..S-1``; output classes ``0..S-1`` (tokens ``S..2S-1``);
placeholder 2S; vocab 2S+1 (= 5 for binary strings).
"""
from __future__ import annotations

from lengen.tasks.chomsky.base import StringTransduction


class ReverseString(StringTransduction):
    name = "reverse_string"
    level = "dcf"

    def output_length(self, n):
        return n

    def transform(self, s):
        return s.flip(1)
