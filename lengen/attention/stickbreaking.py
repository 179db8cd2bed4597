"""Stick-breaking attention (Tan et al., ICLR 2025): each earlier key takes a share of what the
nearer keys left; no softmax, no positional scheme.

Paper: Tan et al., "Scaling Stick-Breaking Attention: An Efficient
Implementation and In-depth Study", Sec. 2; equations in :mod:`lengen.ops.stickbreaking.naive`.

Softmax is replaced by a stick-breaking process over the earlier keys, nearest first: key j
takes ``beta_ij = sigmoid(q_i k_j / sqrt(d))`` of what the keys between it and the query left,
``A_ij = beta_ij prod_{j < k < i} (1 - beta_ik)``, computed in log space. The paper uses no
positional scheme (``posenc: nope``); any scheme's hooks still apply (rotation before the
logits, a bias inside them). Defined for decoders only (``requires_causal``).

Options (``attention_kwargs``): ``remainder`` = ``current`` (default: the weight no key took,
``1 - sum_j A_ij``, goes to the current token's value, as the public reference's tests add
``rem * v``) or ``none`` (dropped); ``attend_current`` (default false: keys j < i as in the
paper's equations; true lets the current token take a share of the stick too).

Paths (``impl``, the base class's ``attend`` over the declared ``ops``): ``naive`` uses the dense reference (its triangular matrix product costs
O(T^3)); training with ``auto`` the query-blocked op's cumulative sums over one block of all
rows (O(T^2)); evaluation with ``auto`` and ``lean`` the query-blocked op with
``attn_block_size`` rows per block (memory linear in T), which cached decoding also uses
(each row depends on its own logits only, so nothing beyond k and v is cached). No CUDA kernel
here (the public Triton kernel lives in ``shawntan/stickbreaking-attention``).
"""
from __future__ import annotations

import functools

from lengen.attention.base import Attention
from lengen.checks import Bool, Choice
from lengen.ops.select import Ops
from lengen.ops.stickbreaking import (stickbreaking_attention_chunked,
                                      stickbreaking_attention_naive)
from lengen.ops.stickbreaking.naive import REMAINDERS


class StickBreakingAttention(Attention):
    requires_causal = True        # the stick is broken from the query backwards: a decoder
    reads_x = False               # attend ignores x (lengen.attention.base)
    KWARG_RULES = {"remainder": Choice(*REMAINDERS), "attend_current": Bool()}
    ops = Ops(naive=stickbreaking_attention_naive, lean=stickbreaking_attention_chunked)

    def __init__(self, *, remainder: str = "current", attend_current: bool = False, **kw):
        super().__init__(**kw)
        if remainder not in REMAINDERS:
            raise ValueError(f"attention_kwargs.remainder must be one of {', '.join(REMAINDERS)}"
                             f", got {remainder!r}")
        self.remainder, self.attend_current = remainder, bool(attend_current)

    def op_args(self, q, x):
        return (), {"remainder": self.remainder, "attend_current": self.attend_current}

    def training_op(self, q, k, v, bias_fn, rows):
        """Training with ``auto``, on any device: one block of all rows of the O(T^2)
        cumulative-sum op (the reference's triangular product is O(T^3))."""
        return functools.partial(stickbreaking_attention_chunked, block_size=q.shape[-2])
