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

from lengen.attention.base import Attention
from lengen.ops.fused_rows import fused_applies, fused_attention
from lengen.ops.softmax import softmax_attention_chunked, softmax_attention_naive
from lengen.ops.softmax.fast_cpu import softmax_attention_fast_cpu


#: widest head for which training without a bias takes the C kernel instead of SDPA: faster at
#: 16 and 32; at 64 an earlier version of the kernel was slower and the final one is level
#: (benchmarks/RESULTS.md, "Fused rows"), so SDPA keeps the wider heads
FUSED_MAX_HEAD_DIM = 32


class SoftmaxAttention(Attention):
    reads_x = False                       # attend ignores x (lengen.attention.base)

    def attend(self, q, k, v, x, bias_fn, rows=None):
        if self.record_weights:
            return self._keep(softmax_attention_naive(q, k, v, causal=self.causal, bias_fn=bias_fn,
                                                      return_weights=True))
        if self.impl == "naive":
            return softmax_attention_naive(q, k, v, causal=self.causal, bias_fn=bias_fn)
        scale = q.shape[-1] ** -0.5                          # SDPA's default
        if (bias_fn is None and self.impl == "auto" and not self.use_lean()
                and q.shape[-1] <= FUSED_MAX_HEAD_DIM
                and fused_applies(q, k, v, scale, None, None, self.causal)):
            # CPU training: one C pass per query row beats SDPA's CPU kernel at small head dims
            # (benchmarks/RESULTS.md, "Fused rows"); CUDA tensors never get here (fused_applies)
            return fused_attention(q, k, v, scale=scale, rows=rows)
        if bias_fn is None or self.use_lean():
            return softmax_attention_chunked(q, k, v, causal=self.causal, bias_fn=bias_fn,
                                             block_size=self.block_size)
        if self.impl == "auto" and q.device.type == "cpu":
            return softmax_attention_fast_cpu(q, k, v, causal=self.causal, bias_fn=bias_fn,
                                              rows=rows)
        # CUDA training with a bias (a Triton kernel would be selected here): one SDPA call over
        # the full [H, T, T] bias
        return softmax_attention_chunked(q, k, v, causal=self.causal, bias_fn=bias_fn,
                                         block_size=q.shape[-2])

    def attend_cached(self, q, k, v, x, bias_fn, q_offset, cache):
        return softmax_attention_chunked(q, k, v, causal=True, bias_fn=bias_fn,
                                         block_size=self.block_size, q_offset=q_offset)
