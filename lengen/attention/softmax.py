"""Standard softmax attention (Vaswani et al. 2017).

Uses ``F.scaled_dot_product_attention`` whenever the positional scheme adds no bias (NoPE,
learned, sin/cos, RoPE), which is both the fast and the memory-lean path. The exception is
causal CPU training with ``impl='auto'`` and a head dim of at most 32: it runs the per-row C
kernel of :mod:`lengen.ops.fused_rows` where that applies (faster than SDPA's CPU kernel
there). With a bias (ALiBi, T5, ...) training with ``impl='auto'`` on CPU uses
:mod:`lengen.ops.softmax.fast_cpu` (SDPA would take its unfused math path to give the bias a
gradient); evaluation uses the query-blocked SDPA op.
"""
from __future__ import annotations

import functools

from lengen.attention.base import Attention
from lengen.ops.fused_rows import fused_applies, fused_attention
from lengen.ops.select import Ops, cpu_training_op
from lengen.ops.softmax import softmax_attention_chunked, softmax_attention_naive
from lengen.ops.softmax.fast_cpu import softmax_attention_fast_cpu


#: widest head for which training without a bias takes the C kernel instead of SDPA: faster at
#: 16 and 32; at 64 an earlier version of the kernel was slower and the final one is level
#: (benchmarks/RESULTS.md, "Fused rows"), so SDPA keeps the wider heads
FUSED_MAX_HEAD_DIM = 32


class SoftmaxAttention(Attention):
    reads_x = False                       # attend ignores x (lengen.attention.base)
    supports_window = True                # window / chunk masks in all three ops
    ops = Ops(naive=softmax_attention_naive, lean=softmax_attention_chunked,
              fast_cpu=softmax_attention_fast_cpu)

    def op_args(self, q, x):
        return (), {"causal": self.causal, **self.local_args()}

    def training_op(self, q, k, v, bias_fn, rows):
        """Without a bias: the per-row C kernel for causal float32 CPU training at head dims up
        to ``FUSED_MAX_HEAD_DIM`` (faster than SDPA's CPU kernel there; benchmarks/RESULTS.md,
        "Fused rows"; CUDA tensors never take it, :func:`fused_applies`), else SDPA through the
        query-blocked op. With a bias: the tiled CPU op (SDPA would take its unfused math path
        to give the bias a gradient), and off the CPU one SDPA call over the full [H, T, T]
        bias (a Triton kernel would be selected here). A layer with a window or chunk mask
        trains with the query-blocked op, which reads only each block's visible keys."""
        if self.window is not None or self.chunk is not None:
            return functools.partial(softmax_attention_chunked, block_size=self.block_size)
        if bias_fn is None:
            scale = q.shape[-1] ** -0.5                                # SDPA's default
            if (q.shape[-1] <= FUSED_MAX_HEAD_DIM
                    and fused_applies(q, k, v, scale, None, None, self.causal)):
                return functools.partial(fused_softmax, rows=rows)
            return functools.partial(softmax_attention_chunked, block_size=self.block_size)
        if (op := cpu_training_op(softmax_attention_fast_cpu, q, rows)) is not None:
            return op
        return functools.partial(softmax_attention_chunked, block_size=q.shape[-2])


def fused_softmax(q, k, v, *, causal=True, bias_fn=None, rows=None):
    """Causal softmax attention without a bias through the per-row C kernel
    (:func:`lengen.ops.fused_rows.fused_attention`; :func:`fused_applies` checked first)."""
    return fused_attention(q, k, v, scale=q.shape[-1] ** -0.5, rows=rows)
