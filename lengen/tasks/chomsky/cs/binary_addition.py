"""Chomsky CS: add two little-endian binary numbers.

Binary addition; Deletang et al. 2023; Ruoss et al. 2023, Table 1.

Input (length ``n >= 3``): ``a + b`` with ``a`` and ``b`` in little-endian binary (least
significant bit first). The split is uniform: ``len(a)`` in ``1..n-2``, ``len(b) = n - 1 -
len(a)``; each operand is uniform over ``1 .. 2^len - 1`` written with exactly ``len`` bits (so it
may end in zeros). Output (``n + 1`` positions): ``a + b`` in little-endian binary without trailing
zeros, the terminator 2, then 0s. Accuracy counts positions up to and including the terminator;
the loss covers all ``n + 1`` positions. Examples::

    001+01101    (4 + 22 = 26)  -> 01011 2 0000
    1001+000001  (9 + 32 = 41)  -> 100101 2 00000

Lengths 1 and 2 leave no room for ``+``; like the reference, the input is then a single number
uniform in ``0 .. 2^n - 2`` (``n`` bits) and the output is that number (``0`` for zero), the
terminator and 0s.

Ids: inputs 0, 1, 2 = ``+``; output classes 0, 1, 2 = end (tokens 3, 4, 5); placeholder 6;
vocab 7.

The sum is exact bit-vector arithmetic on ``[B, W]`` little-endian 0/1 tensors, with the carry
chains resolved by one prefix scan (no Python big integers); binary multiplication and square root
share the operand samplers below.
"""
from __future__ import annotations

import torch

from lengen.tasks.chomsky.base import ChomskyTask, randint_below

SEP = 2


def carries_in(decisive: torch.Tensor, carry_out: torch.Tensor) -> torch.Tensor:
    """Carry into each position of a ripple chain: ``carry_out`` at the last *decisive* position
    strictly before it (0 if none). Non-decisive positions pass their incoming carry on."""
    B, W = decisive.shape
    last = torch.where(decisive, torch.arange(W), -1).cummax(1).values      # last decisive <= j
    before = torch.cat([torch.full((B, 1), -1), last[:, :-1]], 1)           # last decisive < j
    return torch.where(before >= 0, carry_out.gather(1, before.clamp(min=0)), 0)


def add_bits(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a + b`` (bits beyond the width are dropped). A column with equal bits decides its carry
    out (= the bit); a column with different bits propagates the incoming carry."""
    return (a ^ b) ^ carries_in(a == b, a & b)


def bit_length(bits: torch.Tensor) -> torch.Tensor:
    """Index of the highest set bit + 1, per row (0 for zero)."""
    return (bits * torch.arange(1, bits.shape[1] + 1)).max(1).values


def random_nonzero_bits(widths: torch.Tensor, total: int,
                        generator: torch.Generator) -> torch.Tensor:
    """Little-endian ``[B, total]`` bits of numbers uniform in ``1 .. 2^width - 1`` (per row;
    bits at and above ``width`` are 0). All-zero rows are redrawn (rejection sampling)."""
    if bool((widths < 1).any()):
        raise ValueError("operand widths must be >= 1 (zero-width numbers cannot be nonzero)")
    keep = torch.arange(total) < widths[:, None]
    bits = torch.randint(0, 2, keep.shape, generator=generator) * keep
    redo = bits.sum(1) == 0
    while redo.any():
        rows = redo.nonzero()[:, 0]
        bits[rows] = torch.randint(0, 2, (rows.numel(), total), generator=generator) * keep[rows]
        redo = bits.sum(1) == 0
    return bits


def split_operands(n: int, batch_size: int, generator: torch.Generator):
    """``a SEP b`` inputs of length ``n >= 3`` -> (inputs [B, n], a bits, b bits), both [B, n]."""
    pos = torch.arange(n)
    len_a = 1 + randint_below(torch.full((batch_size,), n - 2), generator)
    len_b = n - 1 - len_a
    a = random_nonzero_bits(len_a, n, generator)
    b = random_nonzero_bits(len_b, n, generator)
    la = len_a[:, None]
    b_at = b.gather(1, (pos - la - 1).clamp(min=0))
    x = torch.where(pos < la, a, torch.where(pos == la, SEP, b_at))
    return x, a, b


def terminated(bits: torch.Tensor, width: int, min_length: int = 0) -> torch.Tensor:
    """``bits`` without trailing zeros (at least ``min_length`` bits), the terminator 2, then 0s,
    as ``[B, width]``."""
    r = bit_length(bits).clamp(min=min_length)[:, None]
    pos = torch.arange(width)
    padded = torch.zeros(bits.shape[0], width, dtype=torch.long)
    w = min(width, bits.shape[1])
    padded[:, :w] = bits[:, :w]
    return torch.where(pos < r, padded, torch.where(pos == r, 2, 0))


def small_number(n: int, batch_size: int, generator: torch.Generator) -> torch.Tensor:
    """Lengths 1-2 (no room for an operator): ``n`` little-endian bits of a number uniform in
    ``0 .. 2^n - 2`` (the reference's range)."""
    v = torch.randint(0, 2 ** n - 1, (batch_size, 1), generator=generator)
    return (v >> torch.arange(n)) & 1


class BinaryAddition(ChomskyTask):
    name = "binary_addition"
    level = "cs"
    input_size = 3
    output_size = 3
    terminator = 2

    def output_length(self, n):
        return n + 1

    def sample(self, n, batch_size, generator):
        if n <= 2:
            x = small_number(n, batch_size, generator)
            return x, terminated(x, n + 1, min_length=1)
        x, a, b = split_operands(n, batch_size, generator)
        return x, terminated(add_bits(a, b), n + 1)
