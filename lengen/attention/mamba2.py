"""Mamba-2 as a token mixer (Dao & Gu, "Transformers are SSMs: Generalized Models and Efficient
Algorithms Through Structured State Space Duality", ICML 2024; the block of Sec. 7.1, Fig. 6).

From the block input x [B, T, D] (d_inner = expand * D, H = model.n_heads heads of P = d_inner /
H channels, G groups of state size N):

1. one input projection to (z [d_inner], x [d_inner], B [G N], C [G N], dt [H]) (the "parallel
   projections" of Sec. 7.1);
2. a short causal depthwise convolution (width ``d_conv``, with bias) over (x, B, C), then SiLU;
3. ``dt = softplus(dt + dt_bias)``, ``A = -exp(A_log)`` (a scalar per head);
4. the SSD recurrence ``h_t = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T``, ``y_t = h_t C_t + D x_t``
   (eq. (1) with a scalar decay; :mod:`lengen.ops.mamba2.naive`);
5. the gated RMSNorm ``y = RMSNorm(y * silu(z))`` (normalisation after the gate, over d_inner,
   the reference code's ``norm_before_gate=False`` with one group), then the output projection.

``impl=naive`` runs the token-by-token recurrence and the written-out convolution; ``lean`` /
``auto`` the chunked SSD algorithm (Sec. 6, :mod:`lengen.ops.mamba2.chunked`; chunks of
model.attn_block_size tokens, at most 64) and ``F.conv1d``, tested equal; the layer is also
tested against flash-linear-attention's ``Mamba2`` on its PyTorch path where that package is
installed. Cached decoding keeps the convolution's window and the state h.

Initialisation as the reference implementation (``mamba_ssm`` Mamba2Simple, mirrored by
flash-linear-attention's Mamba2 layer): ``A = U(1, 16)`` per head (``A_log = log A``), ``dt``
log-uniform in [dt_min, dt_max] (floored at 1e-4) with ``dt_bias`` its softplus inverse,
``D = 1``, the norm's weight 1, the convolution as ``nn.Conv1d``'s default; the projections get
the model's generic init.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from lengen.attention.mixer import TokenMixer
from lengen.ops.linear import Linear
from lengen.ops.mamba2 import ssd_chunked, ssd_naive
from lengen.ops.short_conv import causal_conv, causal_conv_naive


def softplus_inverse_dt(n: int, dt_min: float, dt_max: float, floor: float = 1e-4) -> torch.Tensor:
    """[n] biases b with softplus(b) = dt, dt log-uniform in [dt_min, dt_max] (at least floor)."""
    dt = torch.exp(torch.rand(n) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
    dt = dt.clamp(min=floor)
    return dt + torch.log(-torch.expm1(-dt))


def gated_rms_norm(y: torch.Tensor, gate: torch.Tensor, weight: torch.Tensor,
                   eps: float) -> torch.Tensor:
    """RMSNorm(y * silu(gate)) * weight over the last dim."""
    y = y * F.silu(gate)
    return y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + eps) * weight.to(y.dtype)


class Mamba2Mixer(TokenMixer):
    """Mamba-2 (SSD) layer in place of attention (Dao & Gu 2024)."""

    state_names = ("mamba2_conv", "mamba2_ssm")

    def __init__(self, *, d_state: int = 16, expand: int = 2, d_conv: int = 4, n_groups: int = 1,
                 dt_min: float = 0.001, dt_max: float = 0.1, norm_eps: float = 1e-5, **kw):
        super().__init__(**kw)
        for name, v in (("d_state", d_state), ("expand", expand), ("d_conv", d_conv),
                        ("n_groups", n_groups)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"attention_kwargs.{name} must be an integer >= 1, got {v!r}")
        if self.n_heads % n_groups:
            raise ValueError(f"attention_kwargs.n_groups={n_groups} must divide model.n_heads="
                             f"{self.n_heads} (heads share B and C within a group)")
        if not 0 < dt_min <= dt_max:
            raise ValueError(f"attention_kwargs.dt_min={dt_min} and dt_max={dt_max} must satisfy "
                             f"0 < dt_min <= dt_max")
        self.d_state, self.expand, self.d_conv, self.n_groups = d_state, expand, d_conv, n_groups
        self.dt_min, self.dt_max, self.norm_eps = dt_min, dt_max, norm_eps
        self.d_inner = expand * self.d_model
        self.P = self.d_inner // self.n_heads                          # head dim of the SSM
        self.conv_dim = self.d_inner + 2 * n_groups * d_state          # channels of (x, B, C)
        H = self.n_heads
        self.in_proj = Linear(self.d_model, self.d_inner + self.conv_dim + H, bias=False)
        self.conv_weight = nn.Parameter(torch.empty(self.conv_dim, d_conv))   # [C, K]
        self.conv_bias = nn.Parameter(torch.empty(self.conv_dim))
        self.dt_bias = nn.Parameter(torch.empty(H))
        self.A_log = nn.Parameter(torch.empty(H))
        self.D = nn.Parameter(torch.empty(H))
        self.norm_weight = nn.Parameter(torch.empty(self.d_inner))
        self.out_proj = Linear(self.d_inner, self.d_model, bias=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        H = self.n_heads
        with torch.no_grad():
            bound = 1 / math.sqrt(self.d_conv)          # nn.Conv1d's default (fan_in = d_conv)
            self.conv_weight.uniform_(-bound, bound)
            self.conv_bias.uniform_(-bound, bound)
            self.dt_bias.copy_(softplus_inverse_dt(H, self.dt_min, self.dt_max))
            self.A_log.copy_(torch.empty(H).uniform_(1, 16).log())
            self.D.fill_(1.0)
            self.norm_weight.fill_(1.0)

    def mix(self, x, state):
        Bs, T, _ = x.shape
        H, P, G, N = self.n_heads, self.P, self.n_groups, self.d_state
        zxbcdt = self.in_proj(x)                                          # [B, T, ...]
        out_dtype = zxbcdt.dtype
        cd = self.compute_dtype(zxbcdt)
        z, xbc, dt = zxbcdt.to(cd).split([self.d_inner, self.conv_dim, H], dim=-1)
        conv = causal_conv_naive if self.impl == "naive" else causal_conv
        xbc, conv_state = conv(xbc, self.conv_weight, self.conv_bias,
                               None if state is None else state["mamba2_conv"])
        xbc = F.silu(xbc)
        xs, Bm, Cm = xbc.split([self.d_inner, G * N, G * N], dim=-1)
        xs = xs.reshape(Bs, T, H, P)
        Bm, Cm = Bm.reshape(Bs, T, G, N), Cm.reshape(Bs, T, G, N)
        dt = F.softplus(dt + self.dt_bias.to(cd))                        # [B, T, H]
        A = -torch.exp(self.A_log.to(cd))                                 # [H]
        h0 = None if state is None else state["mamba2_ssm"].to(cd)
        if self.impl == "naive":
            y, h = ssd_naive(xs, dt, A, Bm, Cm, h0)
        else:
            y, h = ssd_chunked(xs, dt, A, Bm, Cm, h0, chunk=self.chunk)  # [B, T, H, P]
        y = y + self.D.to(cd)[:, None] * xs
        y = gated_rms_norm(y.reshape(Bs, T, self.d_inner), z, self.norm_weight, self.norm_eps)
        return self.out_proj(y.to(out_dtype)), {"mamba2_conv": conv_state, "mamba2_ssm": h}
