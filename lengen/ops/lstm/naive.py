"""The LSTM recurrence step by step (Hochreiter & Schmidhuber 1997, with the forget gate of Gers
et al. 2000), in ``torch.nn.LSTM``'s parametrisation and gate order, as the reference its fast
path (cuDNN / oneDNN behind ``nn.LSTM``) is tested against:

    i_t = sigmoid(W_ii x_t + b_ii + W_hi h_{t-1} + b_hi)
    f_t = sigmoid(W_if x_t + b_if + W_hf h_{t-1} + b_hf)
    g_t = tanh(W_ig x_t + b_ig + W_hg h_{t-1} + b_hg)
    o_t = sigmoid(W_io x_t + b_io + W_ho h_{t-1} + b_ho)
    c_t = f_t * c_{t-1} + i_t * g_t
    h_t = o_t * tanh(c_t)
"""
from __future__ import annotations

import torch


def lstm_naive(x: torch.Tensor, w_ih: torch.Tensor, w_hh: torch.Tensor, b_ih: torch.Tensor,
               b_hh: torch.Tensor, h: torch.Tensor | None = None, c: torch.Tensor | None = None):
    """x [B, T, D], w_ih [4H, D], w_hh [4H, H], b_ih / b_hh [4H], h / c [B, H] (zeros when None)
    -> (outputs h_1..h_T [B, T, H], (h_T, c_T))."""
    B, T, _ = x.shape
    H = w_hh.shape[1]
    h = x.new_zeros(B, H) if h is None else h
    c = x.new_zeros(B, H) if c is None else c
    pre = x @ w_ih.t() + b_ih + b_hh                                      # [B, T, 4H]
    out = []
    for t in range(T):
        gates = pre[:, t] + h @ w_hh.t()                                  # [B, 4H]
        i, f, g, o = gates.chunk(4, dim=-1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        out.append(h)
    y = torch.stack(out, dim=1) if out else x.new_zeros(B, 0, H)          # [B, T, H]
    return y, (h, c)
