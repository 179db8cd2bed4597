"""Copy: repeat the prompt's symbols (Kazemnejad et al. 2023; index warping).

Prompt: ``[COPY]``, K symbols i.i.d. uniform over 100 symbols, ``[SEP]``; answer: the same K
symbols, then EOS. Training K ~ U(2, 20) (``max_train_length``), default test splits
``len=2`` .. ``len=100`` (5M, seen and unseen). Example (K = 4)::

    [COPY] q 7 q $ [SEP] q 7 q $ <eos>

Their layout (``copy_multi_char``, verified from the reference data builder): the text
``Copy: q 7 q $ [SEP] q 7 q $ </s>`` tokenised by T5's SentencePiece, every symbol one T5 piece.
Ours maps ``Copy:`` -> ``[COPY]``, ``[SEP]`` -> ``[SEP]``, ``</s>`` -> ``<eos>``, one token per
symbol. Their 100 symbols are the first 100 strings T5 keeps as one token (digits, letters, some
punctuation, then word pieces); ours are 100 one-character names of our own
(:data:`lengen.tasks.sequence.base.SYMBOLS_100`); only their number matters to the task.

Ids: <pad> 0, <eos> 1, [SEP] 2, [COPY] 3, symbols 4..103; vocab 104.
"""
from __future__ import annotations

from lengen.tasks.sequence.base import SYMBOLS_100, SequenceTask


class Copy(SequenceTask):
    name = "copy"
    words = ("[COPY]",)
    symbols = SYMBOLS_100
    item_range = (0, 100)
    default_max_train_length = 20

    def answer_length(self, n):
        return n

    def solve(self, items):
        return items.clone()
