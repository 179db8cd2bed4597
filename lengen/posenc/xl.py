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

Relative positions are ``pos_i - pos_j`` of the sampler's positions (``relative='difference'``,
default: the Ruoss et al. paper's wording, "the differences of sampled positions"); fractional
values are fine. R is evaluated at the *signed* distance, so in a bidirectional encoder keys left
and right of the query get distinct encodings over the whole range. Causal models only ever see
``pos_i - pos_j >= 0``, the original Transformer-XL setting.

``relative='rank'`` is the public code's variant instead: the pair at index distance ``i - j``
gets ``sign(i - j) d_|i-j|``, where ``d_k`` are sorted random DISTANCES (drawn once per layer in
that code; here the sampler's sorted positions, offset by the first one:
:func:`lengen.posenc.distance.rank_relative`; use ``randomized`` with ``zero_first=true`` for the
exact distribution, a sorted draw from [1, L) after a 0). Left keys mirror the right ones
(``randomize_both_sides=False``, the code's default). The public code additionally has a
relative-shift bug that gives every key right of the query one shared encoding in the encoder;
that bug is reproduced by neither variant.

Two exact evaluation paths for the (q + v).W_r R term, chosen per call by cost:

* table: integer relative positions (identity or randomized samplers) take few distinct values;
  project them once (``[U, H, hd]``) and score them against the queries. Evenly stepped integer
  positions (the identity sampler) make the pair -> distance map Toeplitz, so each block of query
  rows scores only its window of distances (``[B, H, rows, Tk + rows - 1]``) and the pairs are a
  strided view of it (the classic "relative shift"); other integer positions gather each pair's
  entry from the block's window. Blocks are written straight into the output and the backward
  walks the same blocks, so no [B, H, tq, U] tensor or second [B, H, tq, Tk] tensor is made
  (on CPU every fresh tensor that size costs its page faults, more than the arithmetic).
* trig: for any positions, ``R(a - b)`` splits by the angle-difference identities into
  ``sin(aw)cos(bw) - cos(aw)sin(bw)`` and ``cos(aw)cos(bw) + sin(aw)sin(bw)``, so the term is one
  matmul of a per-query ``[B, H, tq, d_rel]`` tensor with ``[d_rel, Tk]`` key features; used for
  fractional positions, or when U is so large (randomized positions over a big L) that the table
  would cost more than the trig matmul.

Training on CPU (the tiled ``fast_cpu`` ops of every attention kind): for positions shared by
the batch, :meth:`TransformerXLRelative.tiled_bias` hands the ops the pieces of the bias instead of
the [B, H, T, T] tensor (:mod:`lengen.ops.tile_bias`): no attention-sized tensor, its gradient or
its page faults per layer. Evenly stepped positions can take the table (each tile scores its rows
against its window of the table); any positions can take the trig form (each tile is one matmul
of the per-query factor with the key features), which is how randomized positions (Ruoss et al.'s
"Rand. Relative") reach the tiled ops at all. Step times of both forms and of the dense hook:
``benchmarks/steps.py --arms xl`` (benchmarks/RESULTS.md).

Per-sequence positions (``[B, T]`` for either side): the bias is ``[B, H, tq, Tk]`` as always
here. The Toeplitz view needs one progression shared by the batch, so such positions take the
gathered table (each row's ``[B, tq, Tk]`` pair -> column index) or the trig path, by the same
cost rule; both are exact, so ``[B, T]`` with equal rows gives the ``[T]`` values up to the
summation order of the matmuls.
"""
from __future__ import annotations

import torch
from torch import nn

from lengen.checks import Float, Int
from lengen.ops.tile_bias import LowRankBias, RelativeBias
from lengen.posenc.base import PositionalScheme
from lengen.posenc.distance import integer_progression, progression_distances, rank_relative


class TransformerXLRelative(PositionalScheme):
    KWARG_RULES = {"rel_dim": Int(min=2, optional=True), "base": Float(gt=0), "init_std": Float(min=0)}

    has_bias = True

    RELATIVE = ("difference", "rank")

    def __init__(self, *, rel_dim: int | None = None, base: float = 10000.0, init_std: float = 0.02,
                 path: str = "auto", relative: str = "difference", **kw):
        super().__init__(**kw)
        self.rel_dim = self.d_model if rel_dim is None else int(rel_dim)
        if self.rel_dim % 2:
            raise ValueError(f"xl needs an even rel_dim, got {self.rel_dim}")
        if path not in ("auto", "table", "trig"):
            raise ValueError(f"xl path must be auto, table or trig, got '{path}'")
        if relative not in self.RELATIVE:
            raise ValueError(f"unknown model.posenc_kwargs.relative '{relative}' for xl. "
                             f"Valid: {', '.join(self.RELATIVE)}")
        self.path, self.init_std, self.relative = path, init_std, relative
        self.base = float(base)
        self.w_r = nn.Linear(self.rel_dim, self.n_heads * self.head_dim, bias=False)
        self.u = nn.Parameter(torch.empty(self.n_heads, self.head_dim))   # content bias
        self.v = nn.Parameter(torch.empty(self.n_heads, self.head_dim))   # position bias
        self.reset_parameters()

    def reset_parameters(self, init: str = "normal"):
        """``normal``: u, v and W_r from N(0, init_std). ``haiku`` (Ruoss et al.'s reference):
        u, v from N(0, 0.02) (their ``RandomNormal(0.02)``), W_r like a Haiku linear layer,
        truncated normal (+-2 std) with std 1/sqrt(d_rel). Run after the model's generic init."""
        nn.init.normal_(self.u, std=self.init_std if init == "normal" else 0.02)
        nn.init.normal_(self.v, std=self.init_std if init == "normal" else 0.02)
        if init == "haiku":
            std = self.rel_dim ** -0.5
            nn.init.trunc_normal_(self.w_r.weight, std=std, a=-2 * std, b=2 * std)
        else:
            nn.init.normal_(self.w_r.weight, std=self.init_std)

    def angles(self, r: torch.Tensor, dtype) -> torch.Tensor:
        """r: [...] -> r * w: [..., d_rel / 2] in ``dtype`` (fp32 or fp64; never half precision).

        The frequencies are made here rather than kept as a buffer so ``model.half()`` cannot
        round them."""
        inv = self.base ** (-torch.arange(0, self.rel_dim, 2, dtype=torch.float64,
                                          device=r.device) / self.rel_dim)
        return r.to(dtype)[..., None] * inv.to(dtype)

    def sinusoid(self, r: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
        """r: [...] relative positions -> R(r): [..., d_rel] = [sin(r w), cos(r w)] in ``dtype``,
        from float64 angles (an fp32 angle of a distance in the thousands is off by ~1e-4 rad)."""
        ang = self.angles(r, torch.float64)
        return torch.cat([ang.sin(), ang.cos()], dim=-1).to(dtype)

    def bias(self, pos_q, pos_k, q=None, k=None):
        if q is None or k is None:
            raise ValueError("xl needs the attention's q and k in its bias hook")
        qv, content = self.query_and_content(q, k)
        return self.position_term(qv, pos_q, pos_k, content)                # [B, H, tq, Tk]

    def query_and_content(self, q, k):
        """-> ((q + v) * scale: [B, H, tq, hd], (c) = u.k * scale: [B, H, Tk])."""
        scale = self.head_dim ** -0.5
        u = self.u.to(k.dtype)[None, :, None, :]                          # [1, H, 1, hd]
        content = (k * u).sum(-1) * scale                                  # (c): [B, H, Tk]
        qv = (q + self.v.to(q.dtype)[None, :, None, :]) * scale            # [B, H, tq, hd]
        return qv, content

    def tiled_bias(self, pos, q, k):
        """``bias(pos, pos, q, k)`` in a form the CPU training ops evaluate tile by tile, for
        positions shared by the batch (``[T]``); None for ``[B, T]`` positions (dense hook).

        * :class:`lengen.ops.tile_bias.RelativeBias` (``path='table'``, or ``auto`` where
          :meth:`toeplitz_tiles_cheaper`), for positions stepping evenly by an integer: the dense
          hook's table ``P`` of projected distances; each tile scores its rows against its window
          of the table.
        * :class:`lengen.ops.tile_bias.LowRankBias` otherwise (``path='trig'`` or ``auto``, any
          positions, ``relative='difference'``): the trig path's per-query
          ``[B, H, T, d_rel]`` factor and ``[T, d_rel]`` key features (:meth:`trig_factors`);
          each tile is one matmul. ``relative='rank'`` distances are no difference ``a - b``,
          so they have no trig form: None there (dense hook), as for ``path='table'`` on
          positions that are no progression.

        Both carry the same ``(q + v) * scale`` and ``u.k * scale`` as the dense hook."""
        if pos.dim() != 1:
            return None
        r = None if self.path == "trig" else self.toeplitz_distances(pos, pos, q.device)
        toeplitz = r is not None and (self.path == "table" or self.toeplitz_tiles_cheaper())
        if not toeplitz and (self.path == "table" or self.relative == "rank"):
            return None
        qv, content = self.query_and_content(q, k)
        content = content.to(qv.dtype)
        if toeplitz:
            return RelativeBias(qv, self.projected(r, qv.dtype), content)
        left, right = self.trig_factors(qv, pos, pos)
        return LowRankBias(left.to(qv.dtype), right.to(qv.dtype), content)

    def toeplitz_tiles_cheaper(self) -> bool:
        """``path='auto'``'s choice between the two tiled forms for evenly stepped positions, a
        flop count: per query row the Toeplitz window costs three ``head_dim``-wide products over
        about ``2 T`` distances (forward; ``qv`` and table gradients), the low-rank form two
        ``rel_dim``-wide ones over ``T`` keys (forward; ``left`` gradient); T cancels. The
        low-rank form also pays elementwise passes over its ``[B, H, T, rel_dim]`` factor
        outside the tiles, which this count leaves out; ``benchmarks/steps.py --arms xl`` times both."""
        return 3 * 2 * self.head_dim < 2 * self.rel_dim

    def trig_cheaper(self, n_distances: int, Tk: int) -> bool:
        """``path='auto'``'s cost rule, used by every path choice: per (query, head) the table
        path scores ``n_distances`` entries of ``head_dim``, the trig path does a ``rel_dim`` x
        ``Tk`` product; True when the latter is cheaper (never for ``path='table'``)."""
        return self.path == "auto" and n_distances * self.head_dim > Tk * self.rel_dim

    def toeplitz_distances(self, pos_q, pos_k, device):
        """For positions stepping evenly by an integer (shared by the batch): the distances
        ``pos_i - pos_j`` along the Toeplitz table, ``r`` [Tq + Tk - 1] float64 (column
        c = (Tq - 1) - (i - j)); None when the positions are no such progression. Shared by
        :meth:`position_term` and :meth:`tiled_bias`, so both take the same table."""
        Tq, Tk = pos_q.shape[-1], pos_k.shape[-1]
        prog = integer_progression(pos_q, pos_k) if Tq and Tk else None
        if prog is None:
            return None
        # query minus key: the negated progression distances
        return -progression_distances(*prog, Tq, Tk, device=device, dtype=torch.float64)

    # -- (b) + (d): (q_i + v) . W_r R(pos_i - pos_j), plus the per-key term -------------------------
    def position_term(self, qv, pos_q, pos_k, content=None):
        """qv: [B, H, tq, hd], content: [B, H, Tk] or None, pos_q [tq] or [B, tq], pos_k [Tk] or
        [B, Tk] -> qv_i . W_r R(pos_i - pos_j) + content_j: [B, H, tq, Tk]."""
        Tk = pos_k.shape[-1]
        if content is None:
            content = qv.new_zeros(qv.shape[0], qv.shape[1], Tk)
        if self.relative == "rank":
            # the reference's sampled distances: sign(i-j) d_|i-j| is no difference a - b, so
            # no trig identity applies; score the (at most 2 Tk - 1) distinct values as a table
            rel = rank_relative(pos_q, pos_k)                           # [(B,) tq, Tk] float64
            r, idx = torch.unique(rel, return_inverse=True)
            return self.position_term_table(qv, idx.to(qv.device), r.to(qv.device), content)
        if self.path == "trig":
            return self.position_term_trig(qv, pos_q, pos_k, content)
        r = self.toeplitz_distances(pos_q, pos_k, qv.device)
        if r is not None:
            if self.trig_cheaper(r.numel(), Tk):
                return self.position_term_trig(qv, pos_q, pos_k, content)
            return self.position_term_table(qv, None, r, content)
        rel = self.pairwise(pos_q, pos_k, torch.float64)          # [(B,) tq, Tk], exact
        integral = bool((rel == rel.round()).all())
        if self.path == "auto" and not integral:
            return self.position_term_trig(qv, pos_q, pos_k, content)
        r_min, r_max = int(rel.min()), int(rel.max())
        n_rel = r_max - r_min + 1
        if self.trig_cheaper(n_rel, Tk):
            return self.position_term_trig(qv, pos_q, pos_k, content)
        if not integral:
            raise ValueError("xl path='table' needs integer relative positions; "
                             "use 'auto' or 'trig'")
        r = torch.arange(r_min, r_min + n_rel, device=qv.device, dtype=torch.float64)
        return self.position_term_table(qv, (rel.long() - r_min).to(qv.device), r, content)

    def projected(self, r: torch.Tensor, dtype) -> torch.Tensor:
        """r: [U] -> W_r R(r): [H, U, hd]."""
        acc = torch.promote_types(dtype, torch.float32)
        wr = self.w_r(self.sinusoid(r, acc).to(self.w_r.weight.dtype))    # [U, H*hd]
        return wr.view(-1, self.n_heads, self.head_dim).transpose(0, 1).to(dtype)

    def position_term_table(self, qv, idx, r, content):
        """idx: [tq, Tk] or [B, tq, Tk] column of each pair in r, or None for the Toeplitz map
        c = (tq - 1) - i + j; r: [U] relative positions of the table's columns."""
        P = self.projected(r, qv.dtype)                                    # [H, U, hd]
        return _BandedScores.apply(qv, P, content.to(qv.dtype), idx, table_block_rows(qv))

    def trig_factors(self, qv, pos_q, pos_k):
        """-> (left [B, H, tq, d_rel], right [Tk, d_rel] or [B, 1, Tk, d_rel] per sequence) with
        ``qv_i . W_r R(pos_i - pos_j) = left_i . right_j``, in fp32 at least: the identity
        subtracts products of sines, which half precision would blur."""
        acc = torch.promote_types(qv.dtype, torch.float32)
        d2 = self.rel_dim // 2
        w = self.w_r.weight.view(self.n_heads, self.head_dim, self.rel_dim).to(acc)
        a = torch.einsum("bhtd,hdr->bhtr", qv.to(acc), w)     # (q+v) W_r: [B, H, tq, d_rel]
        a_sin, a_cos = a[..., :d2], a[..., d2:]

        def sin_cos(p):   # [tq | Tk, d_rel/2] each, or [B, 1, ..] (broadcast over heads)
            R = self.sinusoid(p, acc)
            R = R if p.dim() == 1 else R.unsqueeze(1)
            return R[..., :d2], R[..., d2:]

        sq, cq = sin_cos(pos_q)
        sk, ck = (sq, cq) if pos_k is pos_q else sin_cos(pos_k)     # self-attention: once
        # a_sin.sin((a-b)w) + a_cos.cos((a-b)w)
        #     = (a_sin sq + a_cos cq).ck + (a_cos sq - a_sin cq).sk
        left = torch.cat([a_sin * sq + a_cos * cq, a_cos * sq - a_sin * cq], dim=-1)
        return left, torch.cat([ck, sk], dim=-1)

    def position_term_trig(self, qv, pos_q, pos_k, content):
        left, right = self.trig_factors(qv, pos_q, pos_k)
        out = (left @ right.transpose(-1, -2)).to(qv.dtype)                # [B, H, tq, Tk]
        return out.add_(content.to(qv.dtype)[:, :, None, :])   # in place: one [.., tq, Tk] tensor


def table_block_rows(qv) -> int:
    """Query rows per block of the table path: small on CPU (the window's extra columns are
    rows - 1 of Tk + rows - 1, and the block's scores stay in cache); whole-ish on accelerators,
    where every block costs kernel launches."""
    return 32 if qv.device.type == "cpu" else 256


class _BandedScores(torch.autograd.Function):
    """out[b, h, i, j] = qv[b, h, i] . P[h, col(i, j)] + content[b, h, j], block of query rows by
    block, with col(i, j) = (tq - 1) - i + j (idx None: a strided view of each block's scores) or
    idx[(b,) i, j] (a gather; a [B, tq, Tk] idx gives each sequence its own columns). Only the
    [B, H, tq, Tk] output is allocated at full size; per block the scores are one
    [H, B * rows, W] bmm against the block's window of columns."""

    @staticmethod
    def forward(ctx, qv, P, content, idx, rows):
        B, H, Tq, _ = qv.shape
        Tk = content.shape[-1]
        qh = qv.transpose(0, 1)                                            # [H, B, tq, hd]
        out = qv.new_empty(B, H, Tq, Tk)
        for i0, i1, lo, hi, cols in _blocks(Tq, Tk, idx, rows):
            n = i1 - i0
            S = torch.bmm(qh[:, :, i0:i1].reshape(H, B * n, -1), P[:, lo:hi].transpose(1, 2))
            picked = _pick(S.view(H, B, n, hi - lo), Tk, cols).transpose(0, 1)   # [B, H, n, Tk]
            torch.add(picked, content[:, :, None, :], out=out[:, :, i0:i1])
        ctx.save_for_backward(qv, P, idx)
        ctx.rows = rows
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        qv, P, idx = ctx.saved_tensors
        need_qv, need_P, need_c = ctx.needs_input_grad[:3]
        B, H, Tq, hd = qv.shape
        Tk = grad.shape[-1]
        dcontent = grad.sum(-2) if need_c else None
        dqv = qv.new_empty(H, B, Tq, hd) if need_qv else None
        dP = torch.zeros_like(P) if need_P else None
        qh, gh = qv.transpose(0, 1), grad.transpose(0, 1)                  # [H, B, ...]
        buf = {}    # Toeplitz: a block's view covers the same entries each time; the rest stay 0
        if need_qv or need_P:
            for i0, i1, lo, hi, cols in _blocks(Tq, Tk, idx, ctx.rows):
                n, W = i1 - i0, hi - lo
                g = gh[:, :, i0:i1]                                        # [H, B, n, Tk]
                if cols is None:
                    dS = buf.get(n)
                    if dS is None:
                        dS = buf[n] = g.new_zeros(H, B, n, W)
                    _pick(dS, Tk, None).copy_(g)
                else:
                    dS = g.new_zeros(H, B, n, W)
                    dS.scatter_add_(-1, cols.expand_as(g), g)
                dS = dS.view(H, B * n, W)
                if need_qv:
                    dqv[:, :, i0:i1] = torch.bmm(dS, P[:, lo:hi]).view(H, B, n, hd)
                if need_P:
                    q_blk = qh[:, :, i0:i1].reshape(H, B * n, hd)
                    dP[:, lo:hi] += torch.bmm(dS.transpose(1, 2), q_blk)
        if dqv is not None:
            dqv = dqv.transpose(0, 1)
        return dqv, dP, dcontent, None, None


def _blocks(Tq, Tk, idx, rows):
    """Yield (i0, i1, lo, hi, cols): query rows i0..i1-1 use table columns lo..hi-1; cols is
    None (Toeplitz) or the rows' [(B,) n, Tk] columns minus lo."""
    for i0 in range(0, Tq, rows):
        i1 = min(Tq, i0 + rows)
        if idx is None:
            lo = Tq - i1                               # column of (i1 - 1, 0)
            yield i0, i1, lo, lo + Tk + (i1 - i0) - 1, None
        else:
            blk = idx[..., i0:i1, :]
            lo, hi = int(blk.min()), int(blk.max()) + 1
            yield i0, i1, lo, hi, blk - lo


def _pick(S, Tk, cols):
    """S: [H, B, n, W] scores of a block's window -> [H, B, n, Tk] entries of its pairs."""
    if cols is not None:
        return S.gather(-1, cols.expand(*S.shape[:2], -1, -1))
    H, B, n, W = S.shape                     # row ii, key j -> column (n - 1) - ii + j
    assert S.is_contiguous()
    return S.as_strided((H, B, n, Tk), (B * n * W, n * W, W - 1, 1), S.storage_offset() + n - 1)
