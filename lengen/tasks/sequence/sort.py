"""Sort: list the prompt's symbols in ascending rank (Kazemnejad et al. 2023; index warping).

The single-digit variant (their ``sngd``): K symbols i.i.d. uniform over 50 ranked symbols (with
repeats, as the reference data builder draws them); the answer lists them sorted by rank, then
EOS. Training K ~ U(2, 8), default test splits ``len=2`` .. ``len=40``. Example (K = 5)::

    [SORT] M E F 3 E [SEP] 3 E E F M <eos>

Their layout: ``Sort the following list [ M, E, F, 3, E ]. The sorted list is [ 3, E, E, F, M ].
</s>`` with no separator token; the answer they train and score is the whole second sentence.
Ours drops the fixed phrases, brackets and commas (``[SORT]`` stands for the instruction,
``[SEP]`` for "The sorted list is"), so the model predicts the K sorted symbols and EOS only: the
same information, about a third of the tokens. Their 50 symbols are the first 50 alphanumeric
strings T5 keeps as one token, ranked in that list's order; ours are ``0-9 a-z A-N`` ranked in
that order, so rank = symbol id. Their multi-digit variant (``mltd``: numbers 10..9999 written
digit by digit) is not implemented.

Ids: <pad> 0, <eos> 1, [SEP] 2, [SORT] 3, symbols 4..53 (rank 0..49); vocab 54.
"""
from __future__ import annotations

from lengen.tasks.sequence.base import ALNUM, SequenceTask


class Sort(SequenceTask):
    name = "sort"
    words = ("[SORT]",)
    symbols = ALNUM[:50]
    item_range = (0, 50)
    default_max_train_length = 8

    def answer_length(self, n):
        return n

    def solve(self, items):
        return items.sort(1).values
