"""Chomsky DCF: run POP / PUSH actions on a stack, output the final stack.

Stack manipulation; Deletang et al. 2023; Ruoss et al. 2023, Table 1.

Input (length ``n``): an initial stack of ``k`` uniform bits, given bottom-to-top, with ``k``
uniform in ``1..n-1``, followed by ``n - k`` uniform actions POP / PUSH 0 / PUSH 1 (for ``n = 1``
the input is a one-bit stack and no action). A POP on an empty stack is ignored. Output
(``n + 1`` positions): the final stack top-to-bottom (the order in which it would be popped), then
the terminator 2, then 0s. Accuracy counts positions up to and including the terminator only; the
loss covers all ``n + 1`` positions, as in the reference. Example::

    0 1 1 0 PUSH1 POP POP          (tokens 0 1 1 0 4 2 2)
      stack 0 1 1 0 -> 0 1 1 0 1 -> 0 1 1 0 -> 0 1 1     (bottom-to-top)
    -> 1 1 0 2 0 0 0 0                                    (top-to-bottom, terminator, zeros)

    1 1 0 POP POP POP              -> 2 0 0 0 0 0 0       (empty stack)

Ids: inputs 0, 1 (stack bits), 2 = POP, 3 = PUSH 0, 4 = PUSH 1; output classes 0, 1, 2 = end of
stack (tokens 5, 6, 7); placeholder 8; vocab 9.
"""
from __future__ import annotations

import torch

from lengen.tasks.chomsky.base import ChomskyTask, randint_below

POP, PUSH0, PUSH1 = 2, 3, 4


class StackManipulation(ChomskyTask):
    name = "stack_manipulation"
    level = "dcf"
    input_size = 5
    output_size = 3
    terminator = 2

    def output_length(self, n):
        return n + 1

    def sample(self, n, batch_size, generator):
        B = batch_size
        pos = torch.arange(n)
        stack_len = 1 + randint_below(torch.full((B, 1), max(n - 1, 1)), generator)  # [B, 1]
        bits = torch.randint(0, 2, (B, n), generator=generator)
        actions = torch.randint(POP, PUSH1 + 1, (B, n), generator=generator)
        x = torch.where(pos < stack_len, bits, actions)
        # Every initial stack symbol and every PUSH is a push. The height after each step is the
        # +-1 walk reflected at 0 (ignored POPs): h_t = S_t - min(0, min_{s<=t} S_s).
        push = x != POP
        walk = torch.where(push, 1, -1).cumsum(1)
        height = walk - walk.cummin(1).values.clamp(max=0)
        # a push survives iff the height never drops below its level afterwards
        later_min = height.flip(1).cummin(1).values.flip(1)
        survive = push & (later_min >= height)
        final = height[:, -1:]                                   # [B, 1] final stack size
        value = torch.where(x < POP, x, x - PUSH0)
        # the surviving push at level l ends up at output position final - l (top first)
        out = torch.zeros(B, n + 2, dtype=torch.long)
        out.scatter_(1, torch.where(survive, final - height, n + 1), value)
        out.scatter_(1, final, torch.full_like(final, self.terminator))
        return x, out[:, :n + 1]
