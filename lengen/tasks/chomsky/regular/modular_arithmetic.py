"""Chomsky R: an unbracketed +-* expression modulo 5.

Modular arithmetic (simple); Deletang et al. 2023; Ruoss et al. 2023, Table 1, "Modular
Arithmetic (Simple)".

Input: ``d op d op ... d`` with residues ``d`` uniform in ``{0..modulus-1}`` and operators uniform
over ``operators`` (default ``+ - *``). The usual precedence applies (``*`` before ``+``/``-``,
left to right otherwise). Output: one class, the value modulo ``modulus``. An expression has odd
length, so an even requested length ``n`` gives ``n - 1`` input tokens (as in the reference).
Examples (modulo 5)::

    1 + 2 * 3          -> 7 mod 5  = 2
    1 - 1 - 1          -> -1 mod 5 = 4
    0 * 1 + 4 * 3 - 2  -> 10 mod 5 = 0

Ids: residues ``0..m-1``; ``+`` = m, ``-`` = m+1, ``*`` = m+2, ``_`` = m+3 (the reference's blank
symbol: part of its one-hot input size of m+4 = 9, never sampled); output classes ``0..m-1``
(tokens m+4 ..); placeholder 2m+4; vocab 2m+5 (= 15 for m = 5).

Reference fix: the reference stores the operator ids in a Python generator, which the first
(jit-traced) length exhausts, so every later length samples from an empty operator set; here the
operators are a tuple and every length uses all of them.
"""
from __future__ import annotations

import torch

from lengen.tasks.chomsky.base import ChomskyTask

OPS = "+-*"          # operator k has id modulus + k


class ModularArithmetic(ChomskyTask):
    name = "modular_arithmetic"
    level = "regular"

    def __init__(self, modulus: int = 5, operators: str | tuple = ("+", "-", "*"), **kwargs):
        super().__init__(**kwargs)
        operators = tuple(operators)
        if not operators or not set(operators) <= set(OPS) or len(set(operators)) < len(operators):
            raise ValueError(f"operators must be distinct symbols from {OPS!r}, got {operators}")
        if modulus < 2:
            raise ValueError(f"modulus must be >= 2, got {modulus}")
        self.modulus = modulus
        self.operators = operators
        self._op_codes = torch.tensor([OPS.index(op) for op in operators])
        self.input_size = modulus + len(OPS) + 1
        self.output_size = modulus

    def input_length(self, n):
        return n if n % 2 == 1 else n - 1

    def sample(self, n, batch_size, generator):
        m, k = self.modulus, self.input_length(n) // 2         # k operators, k + 1 residues
        res = torch.randint(0, m, (batch_size, k + 1), generator=generator)
        pick = torch.randint(0, len(self.operators), (batch_size, k), generator=generator)
        ops = self._op_codes[pick]
        x = torch.empty(batch_size, 2 * k + 1, dtype=torch.long)
        x[:, 0::2] = res
        x[:, 1::2] = ops + m
        # left-to-right scan with precedence: `done` = sum of finished additive terms, `term` =
        # the running (signed) product of the current term
        done = torch.zeros(batch_size, dtype=torch.long)
        term = res[:, 0].clone()
        for i in range(k):
            op, r = ops[:, i], res[:, i + 1]
            times = op == 2
            done = torch.where(times, done, (done + term) % m)
            term = torch.where(times, term * r % m, torch.where(op == 0, r, (-r) % m))
        return x, ((done + term) % m)[:, None]
