"""Reverse: write the prompt's symbols backwards (Kazemnejad et al. 2023; index warping).

Prompt: ``[REVERSE]``, K symbols i.i.d. uniform over 100 symbols, ``[SEP]``; answer: the K symbols
in reverse order, then EOS. Training K ~ U(2, 20), default test splits ``len=2`` .. ``len=100``.
Example (K = 4)::

    [REVERSE] q 7 x $ [SEP] $ x 7 q <eos>

Their layout: ``Reverse: q 7 x $ [SEP] $ x 7 q </s>`` (T5 pieces); ours maps ``Reverse:`` ->
``[REVERSE]``, ``[SEP]`` -> ``[SEP]``, ``</s>`` -> ``<eos>``, with the 100 symbols of
:mod:`lengen.tasks.sequence.copy`.

Ids: <pad> 0, <eos> 1, [SEP] 2, [REVERSE] 3, symbols 4..103; vocab 104.
"""
from __future__ import annotations

from lengen.tasks.sequence.base import SYMBOLS_100, SequenceTask


class Reverse(SequenceTask):
    name = "reverse"
    words = ("[REVERSE]",)
    symbols = SYMBOLS_100
    item_range = (0, 100)
    default_max_train_length = 20

    def answer_length(self, n):
        return n

    def solve(self, items):
        return items.flip(1)
