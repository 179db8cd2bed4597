"""Gated DeltaNet as a token mixer (Yang, Kautz & Hatamizadeh, "Gated Delta Networks: Improving
Mamba2 with Delta Rule", ICLR 2025; the linear layer of Qwen3-Next's hybrid stack).

From the block input x [B, T, D], with H = model.n_heads heads of key dim d_k (``head_dim``,
default D / H) and value dim d_v = ``expand_v`` * d_k:

1. q, k [H d_k] and v [H d_v] projections, each through a short causal depthwise convolution
   (width ``d_conv``, no bias) and SiLU; q and k L2-normalised per head, q scaled by d_k^-1/2;
2. the gates per head: ``alpha_t = exp(-exp(A_log) * softplus(a_proj x_t + dt_bias))`` (Mamba-2's
   decay) and ``beta_t = sigmoid(b_proj x_t)`` (times 2, in (0, 2), with
   ``allow_neg_eigval=true``);
3. the gated delta rule ``S_t = S_{t-1} alpha_t (I - beta_t k_t k_t^T) + beta_t v_t k_t^T``,
   ``o_t = S_t q_t`` (Sec. 3.2; :mod:`lengen.ops.gated_delta.naive`);
4. the output gate: a per-head RMSNorm of o times ``silu(g_proj x)`` (``use_gate=true``; else
   the RMSNorm alone), then the output projection.

The parametrisation (L2-normalised q/k inside the recurrence, the decay's A_log / dt_bias and its
init: A ~ U(0, 16), dt log-uniform in [0.001, 0.1]; the value expansion of 2; bias-free short
convolutions with SiLU; the gated RMSNorm with SiLU) follows flash-linear-attention's
``GatedDeltaNet`` layer, the authors' reference code.

``impl=naive`` runs the token-by-token recurrence; ``lean`` / ``auto`` the chunked UT-transform
form (:mod:`lengen.ops.gated_delta.chunked`, chunks of model.attn_block_size tokens, at most 64),
tested equal, and against flash-linear-attention's ``naive_recurrent_gated_delta_rule`` where
that package is installed. Cached decoding keeps the convolution window and the state S.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from lengen.attention.mamba2 import softplus_inverse_dt
from lengen.attention.mixer import TokenMixer
from lengen.ops.gated_delta import gated_delta_chunked, gated_delta_naive
from lengen.ops.linear import Linear
from lengen.ops.short_conv import causal_conv, causal_conv_naive


def l2_normalize(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """x / sqrt(sum(x^2) + eps) over the last dim (fla's ``l2norm``)."""
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)


class GatedDeltaNetMixer(TokenMixer):
    """Gated DeltaNet layer in place of attention (Yang, Kautz & Hatamizadeh, ICLR 2025)."""

    state_names = ("gdn_conv", "gdn_state")

    def __init__(self, *, head_dim: int | None = None, expand_v: int = 2, d_conv: int = 4,
                 use_gate: bool = True, allow_neg_eigval: bool = False, norm_eps: float = 1e-5,
                 **kw):
        super().__init__(**kw)
        head_dim = self.head_dim if head_dim is None else head_dim
        for name, v in (("head_dim", head_dim), ("expand_v", expand_v), ("d_conv", d_conv)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"attention_kwargs.{name} must be an integer >= 1, got {v!r}")
        H = self.n_heads
        self.dk, self.dv, self.d_conv = head_dim, head_dim * expand_v, d_conv
        self.use_gate, self.allow_neg_eigval, self.norm_eps = use_gate, allow_neg_eigval, norm_eps
        self.key_dim, self.value_dim = H * self.dk, H * self.dv
        self.qkv_dim = 2 * self.key_dim + self.value_dim
        # q, k, v, a (decay input), b (beta) in one projection: [D -> 2 H dk + H dv + 2 H]
        self.in_proj = Linear(self.d_model, self.qkv_dim + 2 * H, bias=False)
        self.conv_weight = nn.Parameter(torch.empty(self.qkv_dim, d_conv))  # q, k, v convs
        self.A_log = nn.Parameter(torch.empty(H))
        self.dt_bias = nn.Parameter(torch.empty(H))
        self.g_proj = Linear(self.d_model, self.value_dim, bias=False) if use_gate else None
        self.norm_weight = nn.Parameter(torch.empty(self.dv))
        self.out_proj = Linear(self.value_dim, self.d_model, bias=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        H = self.n_heads
        with torch.no_grad():
            bound = 1 / self.d_conv ** 0.5                  # nn.Conv1d's default (fan_in = K)
            self.conv_weight.uniform_(-bound, bound)
            self.A_log.copy_(torch.empty(H).uniform_(0, 16).log())
            self.dt_bias.copy_(softplus_inverse_dt(H, 0.001, 0.1))
            self.norm_weight.fill_(1.0)

    def mix(self, x, state):
        Bs, T, _ = x.shape
        H, dk, dv = self.n_heads, self.dk, self.dv
        proj = self.in_proj(x)
        out_dtype = proj.dtype
        cd = self.compute_dtype(proj)
        qkv, a, b = proj.to(cd).split([self.qkv_dim, H, H], dim=-1)
        conv = causal_conv_naive if self.impl == "naive" else causal_conv
        qkv, conv_state = conv(qkv, self.conv_weight, None,
                               None if state is None else state["gdn_conv"])
        q, k, v = F.silu(qkv).split([self.key_dim, self.key_dim, self.value_dim], dim=-1)
        q = l2_normalize(q.reshape(Bs, T, H, dk))
        k = l2_normalize(k.reshape(Bs, T, H, dk))
        v = v.reshape(Bs, T, H, dv)
        g = -self.A_log.to(cd).exp() * F.softplus(a + self.dt_bias.to(cd))   # log alpha [B, T, H]
        beta = torch.sigmoid(b) * (2.0 if self.allow_neg_eigval else 1.0)    # [B, T, H]
        S0 = None if state is None else state["gdn_state"].to(cd)
        if self.impl == "naive":
            o, S = gated_delta_naive(q, k, v, g, beta, S0)
        else:
            o, S = gated_delta_chunked(q, k, v, g, beta, S0, chunk=self.chunk)  # [B, T, H, dv]
        o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + self.norm_eps)
        o = o * self.norm_weight.to(cd)
        if self.g_proj is not None:
            o = o * F.silu(self.g_proj(x).to(cd)).reshape(Bs, T, H, dv)
        y = self.out_proj(o.reshape(Bs, T, self.value_dim).to(out_dtype))
        return y, {"gdn_conv": conv_state, "gdn_state": S}
