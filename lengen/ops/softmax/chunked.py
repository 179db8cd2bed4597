"""Softmax attention through ``F.scaled_dot_product_attention``, blocked over queries when a bias
is present so that the bias (and the score matrix) is never larger than [.., block, T].

``q_offset`` serves cached decoding: the ``Tq`` query rows are the *last* ``Tq`` of the ``Tk``
keys (key positions ``q_offset .. q_offset + Tq - 1``), so with ``causal`` row ``r`` sees keys
``0 .. q_offset + r``. ``q_offset = 0`` with as many keys as queries is ordinary self-attention.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from lengen.ops.common import causal_mask, first_key, local_mask, query_blocks


def softmax_attention_chunked(q, k, v, *, causal=True, bias_fn=None, scale=None, block_size=256,
                              q_offset=0, window=None, chunk=None):
    """q: [B, H, Tq, hd], k, v: [B, H, Tk, hd]; bias_fn(s, e) -> [H, tq, Tk] or [B, H, tq, Tk].
    ``window`` / ``chunk`` (causal only, :func:`lengen.ops.common.local_mask`): a query block
    reads only the keys its rows can see, from :func:`lengen.ops.common.first_key` of its first
    row to its last row, so memory and time per block are O(block x (block + window))."""
    T = q.shape[-2]
    if window is not None or chunk is not None:
        if not causal:
            raise ValueError("window / chunk masks need causal=True")
        outs = []
        for s, e in query_blocks(T, block_size):
            ks, tk = first_key(q_offset + s, window=window, chunk=chunk), q_offset + e
            visible = local_mask(e - s, tk - ks, q_offset + s, q.device, window=window,
                                 chunk=chunk, k_offset=ks)                  # [tq, tk - ks]
            mask = None if bias_fn is None else bias_fn(s, e)[..., ks:tk].to(q.dtype)
            mask = visible if mask is None else mask.masked_fill(~visible, float("-inf"))
            outs.append(F.scaled_dot_product_attention(q[:, :, s:e], k[:, :, ks:tk],
                                                       v[:, :, ks:tk], attn_mask=mask,
                                                       scale=scale))
        return torch.cat(outs, dim=2)
    if bias_fn is None and (not causal or (q_offset == 0 and T == k.shape[-2])):
        # SDPA's fused kernels already use O(T) memory; no blocking needed.
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    outs = []
    for s, e in query_blocks(T, block_size):
        tk = q_offset + e if causal else k.shape[-2]          # causal: later keys are invisible
        mask = None if bias_fn is None else bias_fn(s, e)[..., :tk].to(q.dtype)  # [(B,) H, tq, tk]
        if causal and e - s > 1:                              # one row sees all of its tk keys
            visible = causal_mask(e - s, tk, q_offset + s, q.device)
            mask = visible if mask is None else mask.masked_fill(~visible, float("-inf"))
        outs.append(F.scaled_dot_product_attention(q[:, :, s:e], k[:, :, :tk], v[:, :, :tk],
                                                   attn_mask=mask, scale=scale))
    return torch.cat(outs, dim=2)
