"""Transformer-XL relative positional encoding (Dai et al. 2019, section 3.3).

    logits_ij = scale * ( q_i.k_j  +  u.k_j  +  (q_i + v).W_r R(pos_i - pos_j) )
                          (a)         (c)       (b) + (d)

with learned per-head vectors u, v ([H, hd]), a learned projection W_r ([d_rel] -> [H * hd], no
bias) and the sinusoid ``R(r) = [sin(r w), cos(r w)]``, ``w_f = base^(-2f / d_rel)``, ``d_rel``
= d_model by default (as in Transformer-XL). Term (a) is the attention's own score; this scheme
returns (b)+(c)+(d) through the ``bias`` hook, computed from the q, k the attention hands it
(already rotated / normalised by the attention kind). The attention multiplies only q.k by its
scale, so ``bias`` multiplies its own terms by the same default ``scale = 1/sqrt(hd)``; every kind
here uses that default scale, so the whole logit is scaled once, as in the paper.

Relative positions are ``pos_i - pos_j`` of the sampler's positions (Ruoss et al.'s randomized
relative encoding uses exactly these differences of sampled positions); fractional values are fine.
R is evaluated at the *signed* distance, so in a bidirectional encoder keys left and right of the
query get distinct encodings over the whole range (the public randomized-relative code gives every
key right of the query one shared encoding; that is not reproduced here). Causal models only ever
see ``pos_i - pos_j >= 0``, the original Transformer-XL setting.

Two exact evaluation paths for the (q + v).W_r R term, chosen per call by cost:

* table: integer relative positions (identity or randomized samplers) take few distinct values
  r_min..r_max; project them once (``[U, H, hd]``), score them (``[B, H, tq, U]``), then gather
  each pair's entry (the classic "relative shift" as an index lookup).
* trig: for any positions, ``R(a - b)`` splits by the angle-difference identities into
  ``sin(aw)cos(bw) - cos(aw)sin(bw)`` and ``cos(aw)cos(bw) + sin(aw)sin(bw)``, so the term is one
  matmul of a per-query ``[B, H, tq, d_rel]`` tensor with ``[d_rel, Tk]`` key features; used for
  fractional positions, or when U is so large (randomized positions over a big L) that the table
  would cost more than the trig matmul.
"""
from __future__ import annotations

import torch
from torch import nn

from lengen.posenc.base import PositionalScheme


class TransformerXLRelative(PositionalScheme):
    has_bias = True

    def __init__(self, *, rel_dim: int | None = None, base: float = 10000.0, init_std: float = 0.02,
                 path: str = "auto", **kw):
        super().__init__(**kw)
        self.rel_dim = self.d_model if rel_dim is None else int(rel_dim)
        if self.rel_dim % 2:
            raise ValueError(f"xl needs an even rel_dim, got {self.rel_dim}")
        if path not in ("auto", "table", "trig"):
            raise ValueError(f"xl path must be auto, table or trig, got '{path}'")
        self.path, self.init_std = path, init_std
        self.base = float(base)
        self.w_r = nn.Linear(self.rel_dim, self.n_heads * self.head_dim, bias=False)
        self.u = nn.Parameter(torch.empty(self.n_heads, self.head_dim))   # content bias
        self.v = nn.Parameter(torch.empty(self.n_heads, self.head_dim))   # position bias
        self.reset_parameters()

    def reset_parameters(self):
        for p in (self.u, self.v, self.w_r.weight):
            nn.init.normal_(p, std=self.init_std)

    def angles(self, r: torch.Tensor, dtype) -> torch.Tensor:
        """r: [...] -> r * w: [..., d_rel / 2] in ``dtype`` (fp32 or fp64; never half precision).

        The frequencies are made here rather than kept as a buffer so ``model.half()`` cannot
        round them."""
        inv = self.base ** (-torch.arange(0, self.rel_dim, 2, dtype=torch.float64,
                                          device=r.device) / self.rel_dim)
        return r.to(dtype)[..., None] * inv.to(dtype)

    def sinusoid(self, r: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
        """r: [...] relative positions -> R(r): [..., d_rel] = [sin(r w), cos(r w)]."""
        ang = self.angles(r, dtype)
        return torch.cat([ang.sin(), ang.cos()], dim=-1)

    def bias(self, pos_q, pos_k, q=None, k=None):
        if q is None or k is None:
            raise ValueError("xl needs the attention's q and k in its bias hook")
        scale = self.head_dim ** -0.5
        u = self.u.to(k.dtype)[None, :, None, :]                          # [1, H, 1, hd]
        content = (k * u).sum(-1)[:, :, None, :]                           # (c): [B, H, 1, Tk]
        qv = q + self.v.to(q.dtype)[None, :, None, :]                      # [B, H, tq, hd]
        return (content + self.position_term(qv, pos_q, pos_k)) * scale     # [B, H, tq, Tk]

    # -- (b) + (d): (q_i + v) . W_r R(pos_i - pos_j) ---------------------------------------------
    def position_term(self, qv, pos_q, pos_k):
        rel = pos_q.double()[:, None] - pos_k.double()[None, :]            # [tq, Tk], exact
        integral = bool((rel == rel.round()).all())
        if self.path == "trig" or (self.path == "auto" and not integral):
            return self.position_term_trig(qv, pos_q, pos_k)
        r_min, r_max = int(rel.min()), int(rel.max())
        n_rel = r_max - r_min + 1
        table_cost = n_rel * self.head_dim                  # per (query, head): score U entries
        trig_cost = pos_k.numel() * self.rel_dim            # per (query, head): d_rel x Tk matmul
        if self.path == "auto" and table_cost > trig_cost:
            return self.position_term_trig(qv, pos_q, pos_k)
        if not integral:
            raise ValueError("xl path='table' needs integer relative positions; "
                             "use 'auto' or 'trig'")
        return self.position_term_table(qv, rel.long() - r_min, r_min, n_rel)

    def projected(self, r: torch.Tensor, dtype) -> torch.Tensor:
        """r: [U] -> W_r R(r): [H, U, hd]."""
        acc = torch.promote_types(dtype, torch.float32)
        wr = self.w_r(self.sinusoid(r, acc).to(self.w_r.weight.dtype))    # [U, H*hd]
        return wr.view(-1, self.n_heads, self.head_dim).transpose(0, 1).to(dtype)

    def position_term_table(self, qv, idx, r_min, n_rel):
        r = torch.arange(r_min, r_min + n_rel, device=qv.device, dtype=torch.float64)
        scores = qv @ self.projected(r, qv.dtype).transpose(-1, -2)       # [B, H, tq, U]
        idx = idx.to(qv.device).expand(*scores.shape[:2], -1, -1)          # [B, H, tq, Tk]
        return scores.gather(-1, idx)

    def position_term_trig(self, qv, pos_q, pos_k):
        # fp32 at least: the identity subtracts products of sines, which half precision would blur
        acc = torch.promote_types(qv.dtype, torch.float32)
        d2 = self.rel_dim // 2
        w = self.w_r.weight.view(self.n_heads, self.head_dim, self.rel_dim).to(acc)
        a = torch.einsum("bhtd,hdr->bhtr", qv.to(acc), w)     # (q+v) W_r: [B, H, tq, d_rel]
        a_sin, a_cos = a[..., :d2], a[..., d2:]
        ang_q, ang_k = self.angles(pos_q, acc), self.angles(pos_k, acc)   # [tq | Tk, d_rel/2]
        sq, cq, sk, ck = ang_q.sin(), ang_q.cos(), ang_k.sin(), ang_k.cos()
        # a_sin.sin((a-b)w) + a_cos.cos((a-b)w)
        #     = (a_sin sq + a_cos cq).ck + (a_cos sq - a_sin cq).sk
        left = torch.cat([a_sin * sq + a_cos * cq, a_cos * sq - a_sin * cq], dim=-1)
        right = torch.cat([ck, sk], dim=-1)                                # [Tk, d_rel]
        return (left @ right.transpose(0, 1)).to(qv.dtype)                 # [B, H, tq, Tk]
