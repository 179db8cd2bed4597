"""Chomsky DCF: a fully bracketed +-* expression modulo 5.

Modular arithmetic with brackets; Deletang et al. 2023; Ruoss et al. 2023, Table 1, "Modular
Arithmetic" (level DCF).

An expression of exactly ``n`` symbols is drawn from the reference's recursive grammar: length 1
is a residue ``d``, 2 is ``-d``, 3 is ``(d)``, 4 is ``(-d)``; a longer one is ``(A op B)`` with
``len(A)`` uniform in ``1..n-4``, ``len(B) = n - 3 - len(A)`` and ``op`` uniform over ``+ -`` and,
with ``mult=True`` (the papers' setting), ``*``. Residues are uniform in ``{0..modulus-1}``.
Output: one class, the value modulo ``modulus``. Examples (modulo 5)::

    -3           -> 2
    ((-2)*3)     -> -6 mod 5 = 4
    (1-(4+(-2))) -> -1 mod 5 = 4

Ids: residues ``0..m-1``; ``+`` m, ``-`` m+1, ``*`` m+2, ``(`` m+3, ``)`` m+4, and m+5 (the
reference's ``x``, counted in its input size m+6 = 11, never used here); output classes
``0..m-1`` (tokens m+6 ..); placeholder 2m+6; vocab 2m+7 (= 17 for m = 5).

The reference builds each expression by Python recursion, one sample at a time. Here the same
grammar is expanded breadth-first for the whole batch at once: every level of the parse trees is a
few tensor operations, and the values are folded back up level by level.
"""
from __future__ import annotations

import torch

from lengen.tasks.chomsky.base import ChomskyTask, randint_below

# symbol codes relative to the modulus m: '+' m, '-' m+1, '*' m+2, '(' m+3, ')' m+4
PLUS, MINUS, TIMES, OPEN, CLOSE = range(5)


def sample_bracket_expressions(batch_size: int, length: int, modulus: int, n_ops: int,
                               generator: torch.Generator):
    """Expressions of exactly ``length`` symbols from the grammar above, with operators drawn
    from the first ``n_ops`` of ``+ - *``.

    Returns ``tokens [B, length]`` (residue d -> d, operator/bracket code c -> modulus + c) and
    ``values [B]`` (the expression modulo ``modulus``).
    """
    if length < 1:
        raise ValueError(f"expressions need length >= 1, got {length}")
    m = modulus
    tokens = torch.full((batch_size, length), -1, dtype=torch.long)
    # the frontier of nodes still to expand: (row, start, size)
    row = torch.arange(batch_size)
    start = torch.zeros(batch_size, dtype=torch.long)
    size = torch.full((batch_size,), length, dtype=torch.long)
    levels = []
    while row.numel():
        k = row.numel()
        digit = torch.randint(0, m, (k,), generator=generator)
        op = torch.randint(0, n_ops, (k,), generator=generator)
        left = 1 + randint_below((size - 4).clamp(min=1), generator)    # used where size >= 5

        # leaves: d, -d, (d), (-d)
        leaf = size <= 4
        r, s, z, d = row[leaf], start[leaf], size[leaf], digit[leaf]
        bracket = z >= 3
        neg = (z == 2) | (z == 4)
        tokens[r[bracket], s[bracket]] = m + OPEN
        tokens[r[bracket], (s + z - 1)[bracket]] = m + CLOSE
        tokens[r[neg], (s + bracket.long())[neg]] = m + MINUS
        tokens[r, s + bracket.long() + neg.long()] = d
        leaf_value = torch.where(neg, (-d) % m, d)

        # inner nodes: ( A op B )
        inner = ~leaf
        r, s, z, o, a = row[inner], start[inner], size[inner], op[inner], left[inner]
        tokens[r, s] = m + OPEN
        tokens[r, s + 1 + a] = m + o               # PLUS, MINUS, TIMES are codes 0, 1, 2
        tokens[r, s + z - 1] = m + CLOSE
        levels.append((leaf, leaf_value, o))
        # children: all left operands, then all right operands
        row = torch.cat([r, r])
        start = torch.cat([s + 1, s + 2 + a])
        size = torch.cat([a, z - 3 - a])

    child = torch.zeros(0, dtype=torch.long)
    for leaf, leaf_value, o in reversed(levels):
        value = torch.empty(leaf.shape[0], dtype=torch.long)
        value[leaf] = leaf_value
        a, b = child[:o.numel()], child[o.numel():]
        value[~leaf] = torch.where(o == PLUS, a + b, torch.where(o == MINUS, a - b, a * b)) % m
        child = value
    return tokens, child


class ModularArithmeticBrackets(ChomskyTask):
    name = "modular_arithmetic_brackets"
    level = "dcf"

    def __init__(self, modulus: int = 5, mult: bool = True, **kwargs):
        super().__init__(**kwargs)
        if modulus < 2:
            raise ValueError(f"modulus must be >= 2, got {modulus}")
        self.modulus, self.mult = modulus, mult
        self.input_size = modulus + 6
        self.output_size = modulus

    def sample(self, n, batch_size, generator):
        x, value = sample_bracket_expressions(batch_size, n, self.modulus, 3 if self.mult else 2,
                                              generator)
        return x, value[:, None]
