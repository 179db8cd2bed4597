"""Differential attention (Ye et al. 2024, "Differential Transformer"; op in
:mod:`lengen.ops.diff.naive`).

With ``n_heads`` configured, the layer has ``n_heads // 2`` differential heads. Head h uses the
ordinary heads 2h and 2h+1 (width hd = d_model / n_heads) as its two query/key halves and a value
of width 2*hd, so the projections, parameter count and positional hooks are those of a plain
``n_heads`` layer: RoPE (the TRA paper's Diff baseline) rotates both halves with hd-wide
frequencies, and a bias scheme gives each half its own map.

    lambda      = exp(lq1 . lk1) - exp(lq2 . lk2) + lambda_init     (one scalar per layer)
    lambda_init = 0.8 - 0.6 exp(-0.3 * layer_idx)                    (0-based depth, public code)
    out_h       = RMSNorm_2hd((A1 - lambda A2) v_h) * (1 - lambda_init)

The lambda vectors (width hd) start at N(0, 0.1); the RMSNorm has a learned weight over 2*hd
shared by the heads (the public ``subln``). ``lambda_init`` may be fixed with
``attention_kwargs.lambda_init``.

Paths (``impl``, see :mod:`lengen.attention.base`): training with ``auto`` uses
:mod:`lengen.ops.diff.fast_cpu` (on CPU the per-row C kernel, with or without a bias, skipping
the query rows the loss does not read; elsewhere fused SDPA without a bias); ``naive`` always
uses the dense reference; evaluation with ``auto`` and ``lean`` use the query-blocked op.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from lengen.attention.base import Attention
from lengen.checks import Float
from lengen.ops.diff import diff_attention_chunked, diff_attention_naive
from lengen.ops.diff.fast_cpu import diff_attention_fast_cpu
from lengen.ops.norm import rms_norm
from lengen.ops.select import Ops, cpu_training_op


def default_lambda_init(layer_idx: int) -> float:
    return 0.8 - 0.6 * math.exp(-0.3 * layer_idx)


class DifferentialAttention(Attention):
    supports_wide_qk = False    # q/k as wide as the head (not PoPE's 2 hd): see wide_qk_refusal
    reads_x = False                       # attend ignores x (lengen.attention.base)
    ops = Ops(naive=diff_attention_naive, lean=diff_attention_chunked,
              fast_cpu=diff_attention_fast_cpu)
    KWARG_RULES = {"lambda_init": Float(min=0, lt=1, optional=True), "lambda_std": Float(min=0),
                   "norm_eps": Float(gt=0)}

    def __init__(self, *, n_heads: int, lambda_init: float | None = None, lambda_std: float = 0.1,
                 norm_eps: float = 1e-5, **kw):
        if n_heads % 2:
            raise ValueError(f"diff attention needs an even n_heads (it pairs heads into "
                             f"n_heads // 2 differential heads), got n_heads={n_heads}")
        super().__init__(n_heads=n_heads, **kw)
        self.lambda_init = (default_lambda_init(self.layer_idx) if lambda_init is None
                            else float(lambda_init))
        self.lambda_std, self.norm_eps = lambda_std, norm_eps
        hd = self.head_dim
        self.lambda_q1, self.lambda_k1 = (nn.Parameter(torch.empty(hd)) for _ in range(2))
        self.lambda_q2, self.lambda_k2 = (nn.Parameter(torch.empty(hd)) for _ in range(2))
        self.norm_weight = nn.Parameter(torch.ones(2 * hd))
        self.reset_parameters()

    def reset_parameters(self):
        for p in (self.lambda_q1, self.lambda_k1, self.lambda_q2, self.lambda_k2):
            nn.init.normal_(p, mean=0.0, std=self.lambda_std)
        nn.init.ones_(self.norm_weight)

    def lambda_full(self) -> torch.Tensor:
        """Scalar lambda in fp32 at least (exp of a sum: keep it out of half precision)."""
        acc = torch.promote_types(self.lambda_q1.dtype, torch.float32)
        l1 = torch.exp((self.lambda_q1.to(acc) * self.lambda_k1.to(acc)).sum())
        l2 = torch.exp((self.lambda_q2.to(acc) * self.lambda_k2.to(acc)).sum())
        return l1 - l2 + self.lambda_init

    def value_heads(self, v):
        """[B, H, T, hd] -> [B, H/2, T, 2hd]: heads 2h and 2h+1 share one value of width 2*hd."""
        B, H, T, hd = v.shape
        return v.view(B, H // 2, 2, T, hd).transpose(2, 3).reshape(B, H // 2, T, 2 * hd)

    def op_args(self, q, x):
        return (self.lambda_full().to(q.dtype),), {"causal": self.causal}

    def attend(self, q, k, v, x, bias_fn, rows=None):
        y = super().attend(q, k, self.value_heads(v), x, bias_fn, rows)   # [B, H/2, T, 2hd]
        return self.head_norm(y)

    def attend_cached(self, q, k, v, x, bias_fn, q_offset, cache):
        # v: [B, H/2, Tk, 2hd], paired by value_heads before the cache kept it
        return self.head_norm(super().attend_cached(q, k, v, x, bias_fn, q_offset, cache))

    def training_op(self, q, k, v, bias_fn, rows):
        """The fast op on CPU (``rows``, the query rows whose outputs are read, bound: its C
        kernel skips the others), and elsewhere when there is no bias (fused SDPA); the dense
        reference for a bias off the CPU."""
        if (op := cpu_training_op(self.ops.fast_cpu, q, rows)) is not None:
            return op
        if q.device.type == "cpu":
            return self.ops.naive
        return self.ops.fast_cpu if bias_fn is None else self.ops.naive

    def head_norm(self, y):
        """Per-head RMSNorm over 2*hd, then * (1 - lambda_init): [B, H/2, T, 2hd]."""
        y = rms_norm(y, self.norm_weight, self.norm_eps)
        return y * (1 - self.lambda_init)

