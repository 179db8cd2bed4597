"""Threshold Relative Attention (TRA; "Understanding Attention Glitches with Threshold Relative
Attention", eqs. 3-12; see :mod:`lengen.ops.tra.naive` for the equations).

Keys whose scaled score is not positive are removed entirely; the distance to each surviving key
counts only surviving keys; a per-head, per-query gate ``delta_i = sigmoid(w_f x_i + b)`` turns
that contextual distance into the bias ``Dbar_ij * log(delta_i)``.

``qk_norm`` (default True) RMS-normalises q and k per head without a learned scale, as the only
public runnable TRA code (the workshop notebook) does; the paper's equations do not mention it.
Set ``attention_kwargs.qk_norm=false`` for the equations as printed, ``qk_norm_scale=true`` for
learned per-channel scales on both norms (ones at init; a choice the paper leaves open).

Paths (``impl``, see :mod:`lengen.attention.base`): training with ``auto`` uses the fast CPU op
(:mod:`lengen.ops.tra.fast_cpu`, tiled, hand-written backward) for CPU tensors; ``naive`` always
uses the dense reference; evaluation with ``auto`` and ``lean`` use the query-blocked op, whose
memory grows linearly in T.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lengen.attention.base import Attention
from lengen.ops.norm import rms_norm
from lengen.ops.select import Ops
from lengen.ops.tra import tra_attention_chunked, tra_attention_naive
from lengen.ops.tra.fast_cpu import tra_attention_fast_cpu


def rms_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x * rsqrt(mean(x^2) + eps) over the last dim, no learned scale: ``rms_norm`` of
    :mod:`lengen.ops.norm` without a weight (``F.rms_norm``; in CPU training the C kernel, which
    agrees with it to fp32 rounding; the model-level ``qk_rms`` there stays plain torch)."""
    return rms_norm(x, None, eps)


class ThresholdRelativeAttention(Attention):
    requires_causal = True
    ops = Ops(naive=tra_attention_naive, lean=tra_attention_chunked,
              fast_cpu=tra_attention_fast_cpu,
              triton=("lengen.ops.tra.triton", "tra_attention_triton"))

    def __init__(self, *, qk_norm: bool = True, qk_norm_scale: bool = False,
                 gate_bias_init: float = 0.0, **kw):
        super().__init__(**kw)
        if qk_norm_scale and not qk_norm:
            raise ValueError("attention_kwargs.qk_norm_scale=true needs qk_norm=true (it is the "
                             "learned scale of that norm)")
        # TRA's own q/k norm (before RoPE, with optional scales): kept apart from the base's
        # model-level ``self.qk_norm`` ('none' here: model.qk_norm is refused for tra)
        self.tra_qk_norm, self.gate_bias_init = qk_norm, gate_bias_init
        self.gate = nn.Linear(self.d_model, self.n_heads, bias=True)   # W_f, b of eq. (8)
        # optional learned per-channel scales of the q/k RMS norms (shared by the heads), a
        # choice the paper leaves open; 1 at init, so the layer starts as without them
        self.q_scale = nn.Parameter(torch.ones(self.head_dim)) if qk_norm_scale else None
        self.k_scale = nn.Parameter(torch.ones(self.head_dim)) if qk_norm_scale else None
        self.reset_parameters()

    def reset_parameters(self):
        # delta = sigmoid(0) = 0.5 at init: a clear recency preference among surviving keys
        nn.init.constant_(self.gate.bias, self.gate_bias_init)
        for p in (self.q_scale, self.k_scale):
            if p is not None:
                nn.init.ones_(p)

    def prepare_qk(self, q, k):
        if not self.tra_qk_norm:
            return q, k
        q, k = rms_normalize(q), rms_normalize(k)
        if self.q_scale is not None:
            q, k = q * self.q_scale.to(q.dtype), k * self.k_scale.to(k.dtype)
        return q, k

    def log_gate(self, x):
        """log delta = logsigmoid(w_f x + b) (eq. 8) -> [B, H, T], fp32 at least."""
        acc = torch.promote_types(x.dtype, torch.float32)
        return F.logsigmoid(self.gate(x).to(acc)).transpose(1, 2)

    def op_args(self, q, x):
        return (self.log_gate(x),), {}                                     # [B, H, T]
