"""Standard scaled dot-product attention with an optional additive bias (ground truth)."""
from __future__ import annotations

from lengen.ops.common import causal_mask, local_mask


def softmax_attention_naive(q, k, v, *, causal=True, bias_fn=None, scale=None, return_weights=False,
                            window=None, chunk=None):
    """softmax(q k^T * scale + bias) v, causal optional. q, k, v: [B, H, T, hd]. ``window`` /
    ``chunk`` (causal only): the local masks of :func:`lengen.ops.common.local_mask`."""
    T, Tk = q.shape[-2], k.shape[-2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    logits = (q @ k.transpose(-1, -2)) * scale               # [B, H, T, Tk]
    if bias_fn is not None:
        logits = logits + bias_fn(0, T)
    if window is not None or chunk is not None:
        if not causal:
            raise ValueError("window / chunk masks need causal=True")
        visible = local_mask(T, Tk, 0, q.device, window=window, chunk=chunk)
        logits = logits.masked_fill(~visible, float("-inf"))
    elif causal:
        logits = logits.masked_fill(~causal_mask(T, Tk, 0, q.device), float("-inf"))
    w = logits.softmax(dim=-1)
    out = w @ v                                               # [B, H, T, hd]
    return (out, w) if return_weights else out
