"""PaTH attention (Yang et al., NeurIPS 2025): position from data-dependent Householder
transforms accumulated between key and query.

Paper: "PaTH Attention: Position Encoding via Accumulating Householder Transformations", Sec. 3;
equations in :mod:`lengen.ops.path.naive`.

Position comes from the data: every token t makes a transform ``H_t = I - beta_t w_t w_t^T`` per
head, and query i meets key j through the product of the transforms between them,
``z_ij = q_i^T H_i ... H_{j+1} k_j``. Use with ``posenc: nope`` (PaTH replaces RoPE); a scheme's
hooks still apply (a rotation before, a bias inside the logits).

The transform's parameters follow flash-linear-attention's PaTH layer (``fla/layers/
path_attn.py``): ``w_t`` = per-head L2-normalised ``SiLU(shortconv(W_w x_t))`` with a low-rank
``W_w`` (d_model -> ``w_rank`` -> d_model; ``w_rank=0``: one full matrix) and a causal depthwise
convolution over ``conv_size`` tokens (``w_conv=false``: none); ``beta_t = 2 sigmoid(W_b x_t +
b)`` per head, in (0, 2), so ``H_t`` may reflect (negative eigenvalue). Defined for decoders
only; q and k as wide as the head (``w`` is).

Paths (``impl``, the base class's ``attend`` over the declared ``ops``): ``naive`` uses the
dense reference (a scan over the keys, every query row at once); training with ``auto`` the
paper's compact (UT-transform) form in blocks of 32 tokens, all [T, T] logits at once
(:mod:`lengen.ops.path.blocked`: a triangular solve and matmuls per block, T / 32 steps between
blocks); evaluation with ``auto`` and ``lean`` the same pieces a few query blocks at a time
(:mod:`lengen.ops.path.chunked`, memory linear in T). fla's Triton kernels are not used.
Cached decoding keeps the keys carried to the last token (``"pk"``: ``H_last ... H_{j+1} k_j``,
updated in place with each new token's transform, as fla's decoding does) and the last inputs of
the short convolution (``"wpre"``); the layer's plain ``"k"`` cache is kept as every kind's but
not read.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lengen.attention.base import Attention
from lengen.checks import Bool, Int
from lengen.ops.path import path_attention_chunked, path_attention_naive
from lengen.ops.path.blocked import path_attention_blocked
from lengen.ops.path.chunked import carry_keys
from lengen.ops.select import Ops

class PaTHAttention(Attention):
    requires_causal = True        # the transforms accumulate from key to query: a decoder
    supports_wide_qk = False      # w_t is as wide as the head (see wide_qk_refusal)
    KWARG_RULES = {"w_rank": Int(min=0), "w_conv": Bool(), "conv_size": Int(min=1)}
    ops = Ops(naive=path_attention_naive, lean=path_attention_chunked)

    def __init__(self, *, w_rank: int = 32, w_conv: bool = True, conv_size: int = 3, **kw):
        super().__init__(**kw)
        D = self.d_model
        self.w_rank, self.conv_size = int(w_rank), int(conv_size) if w_conv else 0
        self.w_proj = (nn.Sequential(nn.Linear(D, w_rank, bias=False),
                                     nn.Linear(w_rank, D, bias=False))
                       if w_rank else nn.Linear(D, D, bias=False))
        # causal depthwise convolution over time (weights [D, 1, conv_size]), then SiLU
        self.w_conv = (nn.Conv1d(D, D, self.conv_size, groups=D, bias=False)
                       if self.conv_size else None)
        self.beta_proj = nn.Linear(D, self.n_heads, bias=True)

    def _conv(self, pre, before=None):
        """pre [B, T, D] (+ the last inputs ``before`` [B, Tb, D]) -> SiLU(conv) [B, T, D]."""
        if self.w_conv is None:
            return pre
        T = pre.shape[1]
        if before is None:
            seq = F.pad(pre.transpose(1, 2), (self.conv_size - 1, 0))          # [B, D, *]
        else:
            seq = torch.cat([before, pre], 1).transpose(1, 2)
            seq = F.pad(seq, (max(0, self.conv_size - seq.shape[-1]), 0))
        out = F.conv1d(seq, self.w_conv.weight.to(pre.dtype), groups=self.d_model)
        return F.silu(out[..., -T:].transpose(1, 2))

    def transforms(self, x, before=None):
        """x [B, T, D] -> w [B, H, T, hd] (unit vectors, fp32 at least), beta [B, H, T]."""
        B, T, _ = x.shape
        acc = torch.promote_types(x.dtype, torch.float32)
        w = self._conv(self.w_proj(x), before).to(acc)
        w = F.normalize(w.view(B, T, self.n_heads, self.head_dim), dim=-1).transpose(1, 2)
        beta = 2 * torch.sigmoid(self.beta_proj(x).to(acc)).transpose(1, 2)
        return w, beta

    def op_args(self, q, x):
        """The transforms w [B, H, T, hd] and beta [B, H, T] from the layer input x."""
        return self.transforms(x), {}

    def training_op(self, q, k, v, bias_fn, rows):
        """Training with ``auto``, on any device: all [T, T] logits in the blocked compact form
        (:mod:`lengen.ops.path.blocked`)."""
        return path_attention_blocked

    def attend_cached(self, q, k, v, x, bias_fn, q_offset, cache):
        pre = self.w_proj(x)                                            # [B, T, D]
        conv = self.w_conv is not None and self.conv_size > 1
        before = cache.get("wpre") if conv else None   # [B, <= conv_size - 1, D]: the conv's window
        w, beta = self.transforms(x, before)
        if conv:                              # only the window is kept, not every token so far
            kept = pre if before is None else torch.cat([before, pre], dim=1)
            cache.put("wpre", kept[:, -(self.conv_size - 1):])
        old = cache.get("pk")                                           # [B, H, q_offset, hd]
        keys = k if old is None else torch.cat([old, k[:, :, q_offset:]], dim=2)
        out = path_attention_chunked(q, keys, v, w, beta, bias_fn=bias_fn,
                                     block_size=self.block_size, q_offset=q_offset)
        carried = carry_keys(keys.detach(), w.detach(), beta.detach(), q_offset)
        if old is not None:
            old.copy_(carried[:, :, :q_offset])                         # old keys, in place
        cache.append("pk", carried[:, :, q_offset:])
        return out
