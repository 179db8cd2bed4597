"""Selective attention (Leviathan et al., ICLR 2025): one head's scores mask earlier tokens
for every later query.

Paper: Leviathan, Kalman, Matias, "Selective Attention Improves Transformer", Sec. 3; equations
in :mod:`lengen.ops.selective.naive`.

Parameter-free: head 0's ReLU'd logits say how much each query wants each earlier key dropped;
those requests accumulate over the queries (``F_ij = sum_{i' < i} S_i'j``) and are subtracted
from every head's logits for the later queries. A token never masks itself, and the first token
is never masked (the paper's BOS rule; ``attention_kwargs.mask_bos=true`` lifts it, for tasks
without a BOS token). Defined for decoders only (``requires_causal``). Any positional scheme
composes (its rotation before the logits, its bias inside them, as x-transformers adds its
``attn_bias`` before the selection).

Paths (``impl``, the base class's ``attend`` over the declared ``ops``): ``naive`` and training
with ``auto`` use the dense reference; evaluation with ``auto`` and ``lean`` use the
query-blocked op (memory linear in T). Cached decoding carries
F over the cached keys in the layer cache (``"sel"``, [B, 1, Tk, 1]): each step adds its rows'
selection to the entries of the old keys in place and appends those of its new keys. The carried
F is detached (decoding runs without gradients).
"""
from __future__ import annotations

import torch

from lengen.attention.base import Attention
from lengen.checks import Bool
from lengen.ops.select import Ops
from lengen.ops.selective import selective_attention_chunked, selective_attention_naive
from lengen.ops.selective.chunked import selective_attention_blocks


class SelectiveAttention(Attention):
    requires_causal = True        # F accumulates over earlier queries: a decoder definition
    reads_x = False               # attend ignores x (lengen.attention.base)
    KWARG_RULES = {"mask_bos": Bool()}
    # no CPU or CUDA training op: training with auto takes the dense reference (Ops.training)
    ops = Ops(naive=selective_attention_naive, lean=selective_attention_chunked)

    def __init__(self, *, mask_bos: bool = False, **kw):
        super().__init__(**kw)
        self.mask_bos = bool(mask_bos)

    def op_args(self, q, x):
        return (), {"mask_bos": self.mask_bos}

    def attend_cached(self, q, k, v, x, bias_fn, q_offset, cache):
        prev = cache.get("sel")                                    # [B, 1, q_offset, 1]
        carry = None if prev is None else prev[:, 0, :, 0]
        out, F = selective_attention_blocks(q, k, v, bias_fn=bias_fn, mask_bos=self.mask_bos,
                                            block_size=self.block_size, q_offset=q_offset,
                                            carry=carry)
        F = F.detach()[:, None, :, None]                           # [B, 1, Tk, 1]
        if prev is not None:
            prev.copy_(F[:, :, :q_offset].to(prev.dtype))          # the old keys, in place
        cache.append("sel", F[:, :, q_offset:])                    # the new keys
        return out
