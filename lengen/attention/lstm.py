"""An LSTM layer as a token mixer (Hochreiter & Schmidhuber 1997; forget gate: Gers et al. 2000):
the recurrent baseline of "Neural Networks and the Chomsky Hierarchy" (Delétang et al., ICLR
2023), which Ruoss et al. (2023) compare randomized positions against.

One LSTM layer with hidden size d_model replaces attention in the block: ``h_1..h_T =
LSTM(norm(x))`` (the equations in :mod:`lengen.ops.lstm.naive`), added to the residual stream.
``impl=naive`` runs that step recurrence; ``lean`` / ``auto`` run ``torch.nn.LSTM`` (tested
equal, values and gradients). The state (h, c) is kept in the cache for decoding.

``forget_bias`` (default 1.0) initialises the forget gate's input bias: Haiku's ``hk.LSTM``,
which the Chomsky-hierarchy code builds its LSTM from, adds a constant 1 to the forget gate's
pre-activation (Jozefowicz et al. 2015); a learned bias starting at 1 computes the same function
at init. The other weights keep ``torch.nn.LSTM``'s init (uniform in +-1/sqrt(d_model)).

The paper's baseline is one-hot tokens -> one LSTM layer (hidden 256) -> a linear read-out; the
closest lengen model is ``model.n_layers=1 model.attention=lstm model.posenc=nope``, which adds
the embedding table, the pre-norm residual block and its MLP around the LSTM (docs/mixers.md).
"""
from __future__ import annotations

import contextlib

import torch
from torch import nn

from lengen.attention.mixer import TokenMixer
from lengen.ops.lstm import lstm_naive


class LSTMMixer(TokenMixer):
    """One LSTM layer of hidden size d_model in place of attention (Chomsky-hierarchy baseline)."""

    state_names = ("lstm_h", "lstm_c")

    def __init__(self, *, forget_bias: float = 1.0, **kw):
        super().__init__(**kw)
        self.forget_bias = float(forget_bias)
        self.lstm = nn.LSTM(self.d_model, self.d_model, batch_first=True)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        self.lstm.reset_parameters()
        H = self.d_model
        with torch.no_grad():
            self.lstm.bias_ih_l0[H:2 * H].fill_(self.forget_bias)       # gate order i, f, g, o
            self.lstm.bias_hh_l0[H:2 * H].zero_()

    def mix(self, x, state):
        h0 = c0 = None
        if state is not None:
            h0, c0 = state["lstm_h"], state["lstm_c"]                     # [B, H] each
        if self.impl == "naive":
            p = self.lstm
            y, (h, c) = lstm_naive(x, p.weight_ih_l0, p.weight_hh_l0, p.bias_ih_l0, p.bias_hh_l0,
                                   h0, c0)
        elif x.shape[1] == 0:
            return x, {"lstm_h": h0, "lstm_c": c0}
        else:
            # on CPU, oneDNN has no fp16 LSTM: under autocast it runs in the weights' dtype
            cpu = x.device.type == "cpu"
            dtype = self.lstm.weight_ih_l0.dtype if cpu else x.dtype
            hc = None if h0 is None else (h0[None].to(dtype), c0[None].to(dtype))
            with torch.autocast("cpu", enabled=False) if cpu else contextlib.nullcontext():
                y, (h, c) = self.lstm(x.to(dtype), hc)                    # [B, T, H]
            h, c = h[0], c[0]
        return y, {"lstm_h": h, "lstm_c": c}
