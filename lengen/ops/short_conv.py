"""The short causal depthwise convolution of Mamba-2 and Gated DeltaNet, with a carried window.

``y_t[c] = bias[c] + sum_{k=0}^{K-1} w[c, k] x_{t-K+1+k}[c]``, inputs before the first token
being those of the carried ``state`` (the last K - 1 inputs of the previous call; zeros at the
start). :func:`causal_conv` runs ``F.conv1d`` (groups = channels); :func:`causal_conv_naive` is
the sum above written out, the reference it is tested against. Both return the window the next
call starts from, so cached decoding convolves exactly as the whole sequence would.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def _padded(x: torch.Tensor, state: torch.Tensor | None, K: int) -> torch.Tensor:
    """[B, K - 1 + T, C]: the carried window (zeros when None), then x."""
    if state is None:
        state = x.new_zeros(x.shape[0], K - 1, x.shape[2])
    return torch.cat([state.to(x.dtype), x], dim=1)


def causal_conv(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                state: torch.Tensor | None = None):
    """x [B, T, C], weight [C, K], bias [C] or None, state [B, K - 1, C] or None ->
    (y [B, T, C] before any activation, the new state [B, K - 1, C])."""
    K = weight.shape[1]
    xp = _padded(x, state, K)                                             # [B, K-1+T, C]
    y = F.conv1d(xp.transpose(1, 2), weight.unsqueeze(1).to(x.dtype),
                 None if bias is None else bias.to(x.dtype), groups=x.shape[2])
    return y.transpose(1, 2), xp[:, xp.shape[1] - (K - 1):]


def causal_conv_naive(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                      state: torch.Tensor | None = None):
    """The reference of :func:`causal_conv`: K shifted copies of x, weighted and summed."""
    K, T = weight.shape[1], x.shape[1]
    xp = _padded(x, state, K)                                             # [B, K-1+T, C]
    w = weight.to(x.dtype)
    y = sum(w[:, k] * xp[:, k:k + T] for k in range(K))                   # [B, T, C]
    if bias is not None:
        y = y + bias.to(x.dtype)
    return y, xp[:, xp.shape[1] - (K - 1):]
