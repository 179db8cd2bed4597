"""Forgetting Transformer attention (Lin et al. 2025, ICLR; "FoX").

A forget gate per head and token, ``log f_t = logsigmoid(w_f x_t + b_f)``, adds the data-dependent
decay ``c_i - c_j`` (``c = cumsum(log f)``) to the logits. Following the public FoX code the gate
bias starts at 0 (gates ~0.5) and no other positional scheme is needed (``posenc: nope``).
"""
from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from lengen.attention.base import Attention
from lengen.ops.fot import fot_attention_chunked, fot_attention_naive


class ForgettingAttention(Attention):
    requires_causal = True

    def __init__(self, *, gate_bias_init: float = 0.0, **kw):
        super().__init__(**kw)
        self.gate_bias_init = gate_bias_init
        self.forget_gate = nn.Linear(self.d_model, self.n_heads, bias=True)
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.constant_(self.forget_gate.bias, self.gate_bias_init)

    def attend(self, q, k, v, x, bias_fn):
        log_f = F.logsigmoid(self.forget_gate(x).float()).transpose(1, 2).to(q.dtype)  # [B, H, T]
        if self.record_weights:
            return self._keep(fot_attention_naive(q, k, v, log_f, bias_fn=bias_fn, return_weights=True))
        if self.use_lean():
            return fot_attention_chunked(q, k, v, log_f, bias_fn=bias_fn, block_size=self.block_size)
        return fot_attention_naive(q, k, v, log_f, bias_fn=bias_fn)
