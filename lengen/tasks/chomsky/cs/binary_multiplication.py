"""Chomsky CS: multiply two little-endian binary numbers.

Binary multiplication; Deletang et al. 2023; Ruoss et al. 2023, Table 1.

Input (length ``n >= 3``): ``a * b`` in little-endian binary, sampled exactly as in
:mod:`.binary_addition` (``len(a)`` uniform in ``1..n-2``, operands uniform in ``1 .. 2^len - 1``
with exactly ``len`` bits). Output (``n`` positions; the product has at most ``n - 1`` bits): the
product in little-endian binary without trailing zeros, the terminator 2, then 0s. Accuracy counts
positions up to and including the terminator; the loss covers all ``n`` positions. Examples::

    01001*011    (18 * 6 = 108)  -> 0011011 2 0      (the reference docstring's 00110011 is wrong)
    001*01101    (4 * 22 = 88)   -> 0001101 2 0
    1001*000001  (9 * 32 = 288)  -> 000001001 2 0

Lengths 1 and 2 leave no room for ``*``; like the reference, the input is then ``n`` bits of a
number uniform in ``0 .. 2^n - 2`` and the output is fixed: ``2`` (n = 1) or ``0 2`` (n = 2).

Ids: inputs 0, 1, 2 = ``*``; output classes 0, 1, 2 = end (tokens 3, 4, 5); placeholder 6;
vocab 7.
"""
from __future__ import annotations

import torch

from lengen.tasks.chomsky.base import ChomskyTask
from lengen.tasks.chomsky.cs.binary_addition import small_number, split_operands, terminated


def multiply_bits(a: torch.Tensor, b: torch.Tensor, width: int) -> torch.Tensor:
    """Exact product of little-endian bit rows, as ``[B, width]`` bits (must fit)."""
    W = a.shape[1] + b.shape[1]
    # column sums sum_i a_i b_{k-i} (integers <= min(len) < 2^53, exact after rounding)
    cols = torch.fft.irfft(torch.fft.rfft(a.double(), W) * torch.fft.rfft(b.double(), W), W)
    v = torch.zeros(a.shape[0], max(width, W) + 1, dtype=torch.long)
    v[:, :W] = cols.round().long()
    while bool((v > 1).any()):               # move carries up until every column is a bit
        carry = v >> 1
        v = v & 1
        v[:, 1:] += carry[:, :-1]
    assert not v[:, width:].any(), "product does not fit the requested width"
    return v[:, :width]


class BinaryMultiplication(ChomskyTask):
    name = "binary_multiplication"
    level = "cs"
    input_size = 3
    output_size = 3
    terminator = 2

    def output_length(self, n):
        return n

    def sample(self, n, batch_size, generator):
        if n <= 2:
            x = small_number(n, batch_size, generator)
            y = torch.zeros(batch_size, n, dtype=torch.long)
            y[:, -1] = self.terminator
            return x, y
        x, a, b = split_operands(n, batch_size, generator)
        return x, terminated(multiply_bits(a, b, n), n)
