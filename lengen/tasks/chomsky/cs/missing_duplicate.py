"""Chomsky CS: the blanked-out bit of a string written twice.

Missing duplicate; Deletang et al. 2023; Ruoss et al. 2023, Table 1.

Input (length ``n >= 2``): a uniform binary string ``w`` of length ``n // 2``, written twice
(``ww``), with one position (uniform over all ``2 * (n // 2)``) replaced by the blank 2; an odd
``n`` gets one pad symbol 3 at the end. Output: one class, the blanked bit. Examples::

    0110 0210    -> 1     (w = 0110)
    101 121 3    -> 0     (w = 101, padded)

Length 1 cannot hold ``ww``; like the reference, its input is ``1`` and its target is 1.

Ids: inputs 0, 1, 2 = blank, 3 = pad; output classes 0, 1 (tokens 4, 5); placeholder 6; vocab 7.
"""
from __future__ import annotations

import torch

from lengen.tasks.chomsky.base import ChomskyTask

BLANK, PAD = 2, 3


class MissingDuplicate(ChomskyTask):
    name = "missing_duplicate_string"
    level = "cs"
    input_size = 4
    output_size = 2

    def sample(self, n, batch_size, generator):
        B = batch_size
        if n == 1:
            ones = torch.ones(B, 1, dtype=torch.long)
            return ones, ones.clone()
        h = n // 2
        w = torch.randint(0, 2, (B, h), generator=generator)
        ww = torch.cat([w, w], 1)
        hole = torch.randint(0, 2 * h, (B, 1), generator=generator)
        answer = ww.gather(1, hole)
        x = ww.scatter(1, hole, torch.full_like(hole, BLANK))
        if n % 2:
            x = torch.cat([x, torch.full((B, 1), PAD)], 1)
        return x, answer
