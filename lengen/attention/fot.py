"""Forgetting Transformer attention (Lin et al. 2025, ICLR; "FoX").

A forget gate per head and token, ``log f_t = logsigmoid(w_f x_t + b_f)``, adds the data-dependent
decay ``c_i - c_j`` (``c = cumsum(log f)``) to the logits. Following the public FoX code the gate
bias starts at 0 (gates ~0.5) and no other positional scheme is needed (``posenc: nope``).

Paths (``impl``, see :mod:`lengen.attention.base`): training with ``auto`` uses the fast CPU op
(:mod:`lengen.ops.fot.fast_cpu`: softmax attention with the decay as a per-key bias) for CPU
tensors; ``naive`` always uses the dense reference; evaluation with ``auto`` and
``lean`` use the query-blocked op, whose memory grows linearly in T.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lengen.attention.base import Attention
from lengen.ops.fot import fot_attention_chunked, fot_attention_naive
from lengen.ops.fot.chunked import cumulative_log_forget, fot_attention_blocks
from lengen.ops.fot.fast_cpu import fot_attention_fast_cpu
from lengen.ops.select import Ops


class ForgettingAttention(Attention):
    requires_causal = True
    ops = Ops(naive=fot_attention_naive, lean=fot_attention_chunked,
              fast_cpu=fot_attention_fast_cpu,
              triton=("lengen.ops.fot.triton", "fot_attention_triton"))

    def __init__(self, *, gate_bias_init: float = 0.0, **kw):
        super().__init__(**kw)
        self.gate_bias_init = gate_bias_init
        self.forget_gate = nn.Linear(self.d_model, self.n_heads, bias=True)
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.constant_(self.forget_gate.bias, self.gate_bias_init)

    def log_forget(self, x):
        """log f = logsigmoid(w x + b) -> [B, H, T] in fp32 at least, whatever the model dtype:
        the ops cumsum it, and bf16 rounding would add up over T."""
        acc = torch.promote_types(x.dtype, torch.float32)
        return F.logsigmoid(self.forget_gate(x).to(acc)).transpose(1, 2)

    def op_args(self, q, x):
        return (self.log_forget(x),), {}                                       # [B, H, T]

    def attend_cached(self, q, k, v, x, bias_fn, q_offset, cache):
        log_f = self.log_forget(x)                                             # [B, H, T]
        # carry c = cumsum(log f) (fp32 at least) in the cache, so a new row i gets c_i - c_j
        # against every cached key j without summing the history again
        c = cache.append("c", cumulative_log_forget(log_f, cache.get("c")))    # [B, H, Tk]
        return fot_attention_blocks(q, k, v, c, bias_fn=bias_fn,
                                    block_size=self.block_size, q_offset=q_offset)

