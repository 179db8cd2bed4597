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
from lengen.ops.select import Ops


class ContextualPositionAttention(Attention):
    reads_x = False                       # attend ignores x (lengen.attention.base)
    supports_wide_qk = False    # q/k as wide as the head (not PoPE's 2 hd): see wide_qk_refusal
    requires_causal = True      # positions count keys between j and i: a decoder-side definition
    # no GPU kernel yet: CUDA trains with the dense reference
    ops = Ops(naive=cope_attention_naive, lean=cope_attention_chunked,
              fast_cpu=cope_attention_fast_cpu)

    def __init__(self, *, npos: int = 64, **kw):
        super().__init__(**kw)
        if npos < 1:
            raise ValueError(f"cope needs npos >= 1, got {npos}")
        self.npos = int(npos)
        self.pos_emb = nn.Parameter(torch.zeros(self.head_dim, self.npos))
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.zeros_(self.pos_emb)   # paper: position embeddings start at zero

    def op_args(self, q, x):
        return (self.pos_emb,), {}
