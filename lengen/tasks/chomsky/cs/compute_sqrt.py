"""Chomsky CS: floor of the square root of a big-endian binary number.

Compute sqrt; Deletang et al. 2023; Ruoss et al. 2023, Table 1.

Input: ``n`` bits, big-endian (most significant first), of a number uniform in ``1 .. 2^n - 1``
(leading zeros allowed). Output (``ceil(n / 2)`` positions, enough for any root of an ``n``-bit
number): ``floor(sqrt(x))`` big-endian, zero-padded on the left. Examples::

    100101  (37) -> 110  (6; the reference docstring's 101 is wrong)
    111     (7)  -> 10   (2)

Ids: inputs 0, 1; output classes 0, 1 (tokens 2, 3); placeholder 4; vocab 5.

The root is Python's exact ``math.isqrt`` per row; bits go to and from Python integers through
byte packing in bulk, so a batch of 128 numbers of 500 bits takes a few milliseconds. (A
digit-by-digit root on bit tensors needs ~15 tensor operations per output bit, which is far slower
on a busy CPU.)
"""
from __future__ import annotations

import math

import torch

from lengen.tasks.chomsky.base import ChomskyTask
from lengen.tasks.chomsky.cs.binary_addition import random_nonzero_bits


def bits_to_ints(bits: torch.Tensor) -> list[int]:
    """Big-endian 0/1 rows ``[B, n]`` -> Python integers."""
    B, n = bits.shape
    nbytes = (n + 7) // 8
    padded = torch.zeros(B, nbytes * 8, dtype=torch.long)
    padded[:, nbytes * 8 - n:] = bits                       # left-pad to whole bytes
    packed = (padded.view(B, nbytes, 8) << torch.arange(7, -1, -1)).sum(2)
    raw = bytes(packed.flatten().tolist())
    return [int.from_bytes(raw[i * nbytes:(i + 1) * nbytes], "big") for i in range(B)]


def ints_to_bits(values: list[int], n: int) -> torch.Tensor:
    """Python integers (each < 2^n) -> big-endian 0/1 rows ``[B, n]``."""
    nbytes = (n + 7) // 8
    raw = b"".join(v.to_bytes(nbytes, "big") for v in values)
    packed = torch.frombuffer(bytearray(raw), dtype=torch.uint8).long().view(len(values), nbytes)
    bits = (packed[:, :, None] >> torch.arange(7, -1, -1)) & 1
    return bits.reshape(len(values), nbytes * 8)[:, nbytes * 8 - n:]


class ComputeSqrt(ChomskyTask):
    name = "compute_sqrt"
    level = "cs"
    input_size = 2
    output_size = 2

    def output_length(self, n):
        return math.ceil(n / 2)

    def sample(self, n, batch_size, generator):
        x = random_nonzero_bits(torch.full((batch_size,), n), n, generator).flip(1)
        roots = [math.isqrt(v) for v in bits_to_ints(x)]
        return x, ints_to_bits(roots, self.output_length(n))
