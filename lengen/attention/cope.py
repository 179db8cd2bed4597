"""Contextual Position Encoding attention (CoPE; Golovneva et al. 2024, "Contextual Position
Encoding: Learning to Count What's Important"; equations in :mod:`lengen.ops.cope.naive`).

Positions are counted, not indexed: key j sits at position ``p_ij = sum_{t=j..i} sigmoid(q_i.k_t
/ sqrt(d))`` from query i, and a learned table of ``npos`` position embeddings (``[hd, npos]``,
shared by the heads of a layer, initialised to zero as in the paper) turns that fractional
position into a logit by linear interpolation. Positions beyond ``npos - 1`` are clamped, so a
longer input never reaches an untrained embedding.

``npos`` default 64: the counts are of *gated* keys, so a small table goes far (the paper's
point), the per-layer cost is one extra ``[B, H, T, npos]`` product, and clamped positions make
longer inputs safe. The public counting code defaults to block size + 1 (513 at T=512); set
``attention_kwargs.npos`` to match it. Use with ``posenc: nope`` as in the paper (any scheme's
hooks are still applied: rotate before the gates, bias added to the final logits).

Paths (``impl``): training with ``auto`` uses the CPU op (:mod:`lengen.ops.cope.fast_cpu`,
hand-written backward) for CPU tensors, which for float32 runs the per-row C kernel
(:mod:`lengen.ops.fused_rows`: it makes each row's ``z = scale q.e`` itself, so the
``[B, H, T, npos]`` product is never in memory) and otherwise its tiles; ``naive`` always the
dense reference; evaluation with ``auto`` and ``lean`` the query-blocked op.
"""
from __future__ import annotations

import torch
from torch import nn

from lengen.attention.base import Attention
from lengen.ops.cope import cope_attention_chunked, cope_attention_naive
from lengen.ops.cope.fast_cpu import cope_attention_fast_cpu
from lengen.ops.select import with_rows


class ContextualPositionAttention(Attention):
    reads_x = False                       # attend ignores x (lengen.attention.base)
    supports_wide_qk = False    # q/k as wide as the head (not PoPE's 2 hd): see wide_qk_refusal
    requires_causal = True      # positions count keys between j and i: a decoder-side definition

    def __init__(self, *, npos: int = 64, **kw):
        super().__init__(**kw)
        if npos < 1:
            raise ValueError(f"cope needs npos >= 1, got {npos}")
        self.npos = int(npos)
        self.pos_emb = nn.Parameter(torch.zeros(self.head_dim, self.npos))
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.zeros_(self.pos_emb)   # paper: position embeddings start at zero

    def attend(self, q, k, v, x, bias_fn, rows=None):
        if self.record_weights:
            return self._keep(cope_attention_naive(q, k, v, self.pos_emb, bias_fn=bias_fn,
                                                   return_weights=True))
        if self.use_lean():
            return cope_attention_chunked(q, k, v, self.pos_emb, bias_fn=bias_fn,
                                          block_size=self.block_size)
        if self.impl == "auto":
            return training_op(q, bias_fn, rows)(q, k, v, self.pos_emb, bias_fn=bias_fn)
        return cope_attention_naive(q, k, v, self.pos_emb, bias_fn=bias_fn)

    def attend_cached(self, q, k, v, x, bias_fn, q_offset, cache):
        # gates and counted positions of the new rows over every cached key, in the op
        return cope_attention_chunked(q, k, v, self.pos_emb, bias_fn=bias_fn,
                                      block_size=self.block_size, q_offset=q_offset)


def training_op(q: torch.Tensor, bias_fn=None, rows=None):
    """The op ``impl='auto'`` trains with: the CPU op for CPU tensors (the per-row C kernel where
    it applies, else the tiled op; ``rows`` goes to it), the dense reference elsewhere (no GPU
    kernel yet)."""
    if q.device.type != "cpu":
        return cope_attention_naive
    return with_rows(cope_attention_fast_cpu, rows)
