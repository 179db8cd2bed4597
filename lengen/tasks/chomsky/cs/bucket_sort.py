"""Chomsky CS: sort a string over a 5-symbol alphabet.

Bucket sort; Deletang et al. 2023; Ruoss et al. 2023, Table 1 (permutation-invariant, so
solvable without positional information).

Input: ``n`` symbols uniform over ``n_symbols`` (5 in the papers). Output (``n`` positions): the
same symbols in increasing order. Examples::

    10204112 -> 00111224    (5 symbols)
    1110001  -> 0001111     (2 symbols)

Ids (``n_symbols = S``): inputs ``0..S-1``; output classes ``0..S-1`` (tokens ``S..2S-1``);
placeholder 2S; vocab 2S+1 (= 11 for 5 symbols).
"""
from __future__ import annotations

from lengen.tasks.chomsky.base import StringTransduction


class BucketSort(StringTransduction):
    name = "bucket_sort"
    level = "cs"

    def __init__(self, n_symbols: int = 5, **kwargs):
        super().__init__(n_symbols, **kwargs)

    def output_length(self, n):
        return n

    def transform(self, s):
        return s.sort(1).values
