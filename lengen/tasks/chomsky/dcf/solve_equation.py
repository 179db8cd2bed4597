"""Chomsky DCF: the residue hidden behind x in a bracketed equation modulo 5.

Solve equation; Deletang et al. 2023; Ruoss et al. 2023, Table 1.

For input length ``n >= 3``: draw a bracketed expression of ``n - 2`` symbols with ``+`` and ``-``
only (the grammar of :mod:`.modular_arithmetic_brackets`; the reference never passes ``mult`` to
this task, so the unknown enters with coefficient +-1 and the solution is unique), replace one
residue by ``x`` and append ``= value``. Output: one class, the replaced residue. Which residue is
replaced follows the reference: a uniform position, moved right (cyclically) to the next residue.
Example (modulo 5)::

    (x-(-2))=0   -> 3        (from (3-(-2)) = 5 = 0 mod 5)

Lengths 1 and 2 cannot hold an equation; like the reference, such batches are all-``0`` inputs with
target 0 (they occur in training, where lengths are uniform in 1..40).

Ids: residues ``0..m-1``; ``+`` m, ``-`` m+1, ``(`` m+2, ``)`` m+3, ``x`` m+4, ``=`` m+5 (input
size m+6 = 11, the reference's layout); output classes ``0..m-1`` (tokens m+6 ..); placeholder
2m+6; vocab 2m+7 (= 17 for m = 5).
"""
from __future__ import annotations

import torch

from lengen.tasks.chomsky.base import ChomskyTask, randint_below
from lengen.tasks.chomsky.dcf.modular_arithmetic_brackets import (CLOSE, MINUS, OPEN, PLUS,
                                                                   sample_bracket_expressions)


class SolveEquation(ChomskyTask):
    name = "solve_equation"
    level = "dcf"

    def __init__(self, modulus: int = 5, **kwargs):
        super().__init__(**kwargs)
        if modulus < 2:
            raise ValueError(f"modulus must be >= 2, got {modulus}")
        self.modulus = modulus
        self.input_size = modulus + 6
        self.output_size = modulus

    def sample(self, n, batch_size, generator):
        B, m = batch_size, self.modulus
        if n < 3:
            zeros = torch.zeros(B, n, dtype=torch.long)
            return zeros, torch.zeros(B, 1, dtype=torch.long)
        expr, value = sample_bracket_expressions(B, n - 2, m, 2, generator)
        # expression codes (+ - ( ) at m + 0, 1, 3, 4) -> this task's ids (m + 0, 1, 2, 3)
        remap = torch.tensor([m + 0, m + 1, -1, m + 2, m + 3])
        x = torch.where(expr < m, expr, remap[(expr - m).clamp(min=0)])
        assert PLUS == 0 and MINUS == 1 and OPEN == 3 and CLOSE == 4
        # the residue to hide: first residue at or after a uniform position, wrapping around
        L = n - 2
        pos = torch.arange(L)
        is_digit = x < m
        at = randint_below(torch.full((B, 1), L), generator)
        big = torch.full_like(x, L)
        after = torch.where(is_digit & (pos >= at), pos, big).min(1).values
        first = torch.where(is_digit, pos, big).min(1).values
        hide = torch.where(after < L, after, first)[:, None]
        answer = x.gather(1, hide)
        x = x.scatter(1, hide, torch.full_like(hide, m + 4))
        tail = torch.stack([torch.full((B,), m + 5), value], 1)
        return torch.cat([x, tail], 1), answer
