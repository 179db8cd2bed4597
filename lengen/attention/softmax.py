"""Standard softmax attention (Vaswani et al. 2017).

Uses ``F.scaled_dot_product_attention`` whenever the positional scheme adds no bias (NoPE,
learned, sin/cos, RoPE), which is both the fast and the memory-lean path.
"""
from __future__ import annotations

from lengen.attention.base import Attention
from lengen.ops.softmax import softmax_attention_chunked, softmax_attention_naive


class SoftmaxAttention(Attention):
    def attend(self, q, k, v, x, bias_fn):
        if self.record_weights:
            return self._keep(softmax_attention_naive(q, k, v, causal=self.causal, bias_fn=bias_fn,
                                                      return_weights=True))
        if self.impl == "naive":
            return softmax_attention_naive(q, k, v, causal=self.causal, bias_fn=bias_fn)
        if bias_fn is None or self.use_lean():
            return softmax_attention_chunked(q, k, v, causal=self.causal, bias_fn=bias_fn,
                                             block_size=self.block_size)
        # training with a bias: one SDPA call over the full [H, T, T] bias
        return softmax_attention_chunked(q, k, v, causal=self.causal, bias_fn=bias_fn,
                                         block_size=q.shape[-2])
