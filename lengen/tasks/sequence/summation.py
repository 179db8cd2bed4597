"""Summation: the sum of the prompt's digits modulo 10 (Kazemnejad et al. 2023; index warping).

Prompt: ``[SUM]``, K digits i.i.d. uniform in 1..9, ``[SEP]``; answer: one digit, (sum of the K
digits) mod 10, then EOS. Training K ~ U(2, 8), default test splits ``len=2`` .. ``len=40``.
Example (K = 3)::

    [SUM] 3 3 1 [SEP] 7 <eos>

Their layout (the ``sum_mod`` data, ``modulo_factor`` 10): ``Compute: 3 + 3 + 1 . [SEP] The
answer is 7 . </s>``. Ours maps ``Compute:`` -> ``[SUM]``, ``[SEP]`` -> ``[SEP]``, ``</s>`` ->
``<eos>`` and drops the ``+`` between digits, the final ``.`` and the fixed phrase "The answer
is ... ." (no information; the ``+`` tokens would double the prompt length without changing the
problem). The answer digit may be 0; prompt digits never are (as in their data).

Ids: <pad> 0, <eos> 1, [SEP] 2, [SUM] 3, digits 0..9 = 4..13; vocab 14.
"""
from __future__ import annotations

import string

from lengen.tasks.sequence.base import SequenceTask


class Summation(SequenceTask):
    name = "summation"
    words = ("[SUM]",)
    symbols = tuple(string.digits)           # symbol index = digit value
    item_range = (1, 10)
    default_max_train_length = 8

    def answer_length(self, n):
        return 1

    def solve(self, items):
        return items.sum(1, keepdim=True) % 10
