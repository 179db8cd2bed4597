"""The additive logit terms of the tiled CPU training ops (:class:`TileTerms`): a dense bias, a
per-key column and relative-position biases evaluated tile by tile.

Every tiled op (:mod:`lengen.ops.cpu_tiles`) takes, beside its own scores, a dense bias from its
``bias_fn`` (shared by the batch, ``[H, T, Tk]``: read through a ``Bb = 1`` view, its gradient
summed over the batch in per-thread accumulators; or per sequence, ``[B, H, T, Tk]`` from
``[B, T]`` positions: each group adds into its own batch rows; the gradient comes back in the shape
the bias came in), a per-key column ``col`` ``[B, H, Tk]`` (FoT's decay; its gradient is a column
sum of the logit gradient) and the relative-position term below. :class:`TileTerms` adds them to
each tile and accumulates their gradients, the same for every op.

A bias hook returns the full ``[B, H, T, T]`` logit bias. For Transformer-XL's terms that tensor
depends on q and k, so every layer had to build it, read it once per tile and accumulate a
gradient of the same size (benchmarks/RESULTS.md, "Training step time": Transformer-XL before and
after the tiled bias).
When a scheme's bias has the structure

    bias[b, h, i, j] = qv[b, h, i] . P[h, (T - 1) - i + j]  +  content[b, h, j]        i, j < T

(a per-query vector scored against a table of ``2T - 1`` relative-distance vectors that is the
same along every diagonal -- Transformer-XL's (b) + (d) terms for evenly stepped positions -- plus
a per-key column), the ops take the pieces instead (:class:`RelativeBias`) and make each tile's
part where the tile is already in cache: one ``[G, tq, hd] x [hd, tq + ke - 1]`` matmul against
the tile's window of the table, read through a strided view (row ``r`` of the window starts one
column further left than row ``r - 1``: the classic "relative shift"), and in backward the same
window filled from the logit gradient, two matmuls for the gradients of ``qv`` and of the window
of ``P``. The per-key column is the ops' ``col`` (its gradient is a column sum of the logit
gradient). No ``[B, H, T, T]`` tensor is made.

A bias of the form

    bias[b, h, i, j] = left[b, h, i] . right[j]  +  content[b, h, j]

(a rank-r product with constant key features -- Transformer-XL's (b) + (d) terms in their trig
form, ``R(a - b)`` split by the angle-difference identities, for any positions shared by the
batch) goes in as :class:`LowRankBias`: each tile adds one ``[G tq, r] x [r, ke]`` matmul straight
into its logits, and in backward one ``[G tq, ke] x [ke, r]`` matmul gives the gradient of its
rows of ``left``; no window, strided view or table gradient (``right`` has none).

The dense hook stays the definition: the ops' tests compare both (values and every gradient).

How ops ask for it: attention modules hand their ops a :class:`BiasHook` as ``bias_fn``;
``bias_fn(s, e)`` is the dense bias as always, :func:`tiled_bias` asks the scheme for the tiled
form (``None`` when the scheme has none for these positions; then the dense bias is used). The ops
carry either form as two tensors, ``(qv, P)`` or ``(left, right)``; :class:`TileTerms` tells them
apart by ``P``'s rank (a 3-D table or 2-D key features).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import torch

from lengen.ops.cpu_tiles import LOG2E, flat
from lengen.ops.cpu_workspace import scratch


@dataclass
class RelativeBias:
    """``bias[b, h, i, j] = qv[b, h, i] . P[h, (T - 1) - i + j] + content[b, h, j]`` (i, j < T).

    qv: [B, H, T, hd]; P: [H, 2T - 1, hd]; content: [B, H, T] or None. Every tensor may carry a
    gradient (the ops return one for each)."""
    qv: torch.Tensor
    P: torch.Tensor
    content: torch.Tensor | None = None

    def dense(self) -> torch.Tensor:
        """The full [B, H, T, T] bias (for tests and the dense ops)."""
        T = self.qv.shape[-2]
        i = torch.arange(T, device=self.qv.device)
        col = (T - 1) - i[:, None] + i[None, :]                              # [T, T]
        out = torch.einsum("bhid,hijd->bhij", self.qv, self.P[:, col])
        return out if self.content is None else out + self.content[:, :, None, :]


@dataclass
class LowRankBias:
    """``bias[b, h, i, j] = left[b, h, i] . right[j] + content[b, h, j]`` (i, j < T).

    left: [B, H, T, r] (may carry a gradient); right: [T, r], constant key features (no
    gradient is returned for it); content: [B, H, T] or None."""
    left: torch.Tensor
    right: torch.Tensor
    content: torch.Tensor | None = None

    def dense(self) -> torch.Tensor:
        """The full [B, H, T, T] bias (for tests and the dense ops)."""
        out = self.left @ self.right.to(self.left.dtype).T
        return out if self.content is None else out + self.content[:, :, None, :]


class BiasHook:
    """The ``bias_fn`` of an attention call: ``bias_fn(s, e)`` returns the dense bias of query
    rows ``s..e-1`` (what every op may call); ``tiled()`` returns the scheme's
    :class:`RelativeBias` or :class:`LowRankBias` for the whole square, or None."""

    def __init__(self, dense, tiled=None):
        self._dense, self._tiled = dense, tiled

    def __call__(self, s: int, e: int):
        return self._dense(s, e)

    def tiled(self):
        return None if self._tiled is None else self._tiled()


def tiled_bias(bias_fn, T: int, Tk: int) -> RelativeBias | LowRankBias | None:
    """The tiled form of ``bias_fn`` for a T x Tk self-attention square, or None (no hook, no
    tiled form, or a non-square call)."""
    get = getattr(bias_fn, "tiled", None)
    if get is None or T != Tk:
        return None
    rb = get()
    if rb is None:
        return None
    if isinstance(rb, LowRankBias):
        if rb.left.shape[-2] != T or rb.right.shape[0] != T or rb.right.dim() != 2 or \
                rb.right.shape[-1] != rb.left.shape[-1]:
            raise ValueError(f"tiled low-rank bias for T={T} has left {tuple(rb.left.shape)} "
                             f"and right {tuple(rb.right.shape)}; expected [.., {T}, r] and "
                             f"[{T}, r]")
        return rb
    if rb.qv.shape[-2] != T or rb.P.shape[-2] != 2 * T - 1:
        raise ValueError(f"tiled relative bias for T={T} has qv {tuple(rb.qv.shape)} and "
                         f"P {tuple(rb.P.shape)}; expected [.., {T}, hd] and [H, {2 * T - 1}, hd]")
    return rb


class ToeplitzTiles:
    """Per-tile forward and backward of ``qv_i . P[h, (T - 1) - i + j]`` for the tiled ops.

    ``reverse``: tile columns hold keys in reverse order (column ``c`` of block ``s..e-1`` is key
    ``e - 1 - c``, as in the CoPE op); the table is then read flipped, so the strided view still
    steps forward. Gradients: ``dqv`` rows are written once each (groups own disjoint rows); the
    table's gradient, shared by the batch, is summed in one accumulator per thread.

    ``dtype``: the op's compute dtype (the inputs are cast to it; :meth:`grads` casts back)."""

    def __init__(self, qv: torch.Tensor, P: torch.Tensor, *, reverse: bool = False,
                 need_grad: bool = False, dtype: torch.dtype | None = None):
        self.in_dtypes = (qv.dtype, P.dtype)
        dtype = dtype or qv.dtype
        self.qv = qv.to(dtype).contiguous()                          # [B, H, T, hd]
        P = P.to(dtype)
        self.P = (P.flip(1) if reverse else P).contiguous()          # [H, 2T - 1, hd]
        self.T, self.U, self.hd = qv.shape[-2], P.shape[1], qv.shape[-1]
        self.reverse = reverse
        self.dqv = torch.empty_like(self.qv) if need_grad else None
        self.parts: dict[int, torch.Tensor] = {}

    def _window(self, b0, b1, h0, h1, s, e, ke):
        """-> (table window [G, W, hd], first table row lo, W): the W = tq + ke - 1 distances the
        tile's pairs use, in the order its strided view reads them."""
        tq, nb = e - s, b1 - b0
        W = tq + ke - 1
        lo = self.T - e                                  # distance row of (e - 1, key 0)
        if self.reverse:
            lo = self.U - (lo + W)
        Pw = self.P[h0:h1, lo:lo + W]                                         # [Hg, W, hd]
        if nb > 1:
            Pw = Pw.unsqueeze(0).expand(nb, -1, -1, -1).reshape(-1, W, self.hd)
        return Pw, lo, W

    def _pick(self, X, tq, ke, W):
        """[G, tq, W] window scores -> [G, tq, ke] view of the tile's pairs."""
        G = X.shape[0]
        if self.reverse:                                 # row r, column c -> window r + c
            return X.as_strided((G, tq, ke), (tq * W, W + 1, 1), X.storage_offset())
        return X.as_strided((G, tq, ke), (tq * W, W - 1, 1), X.storage_offset() + tq - 1)

    def add(self, S, b0, b1, h0, h1, s, e, ke, alpha=1.0):
        """S[G, tq, ke] += alpha * (qv_i . P[(T - 1) - i + j]) over the tile's pairs."""
        tq = e - s
        Pw, _, W = self._window(b0, b1, h0, h1, s, e, ke)
        X = scratch("rel.X", (S.shape[0], tq, W), S.dtype, S.device)
        torch.baddbmm(X, flat(self.qv, b0, b1, h0, h1)[:, s:e], Pw.transpose(1, 2), beta=0,
                      alpha=alpha, out=X)
        S.add_(self._pick(X, tq, ke, W))

    def grad(self, dL, b0, b1, h0, h1, s, e, ke):
        """Accumulate the gradients of qv (rows s..e-1 of the group) and P from the tile's
        logit gradient dL [G, tq, ke]."""
        tq, Hg = e - s, h1 - h0
        Pw, lo, W = self._window(b0, b1, h0, h1, s, e, ke)
        dX = scratch("rel.dX", (dL.shape[0], tq, W), dL.dtype, dL.device).zero_()
        self._pick(dX, tq, ke, W).copy_(dL)
        qt = flat(self.qv, b0, b1, h0, h1)[:, s:e]
        dqt = flat(self.dqv, b0, b1, h0, h1)[:, s:e]
        torch.bmm(dX, Pw, out=dqt)
        dPw = torch.bmm(dX.transpose(1, 2), qt)                               # [G, W, hd]
        part = self.parts.get(threading.get_ident())
        if part is None:
            part = self.parts[threading.get_ident()] = torch.zeros_like(self.P)
        part[h0:h1, lo:lo + W] += dPw.view(-1, Hg, W, self.hd).sum(0)

    def grads(self):
        """-> (dqv [B, H, T, hd], dP [H, 2T - 1, hd]) after every tile's :meth:`grad`, in the
        dtypes qv and P came in."""
        parts = list(self.parts.values())
        dP = parts[0] if parts else torch.zeros_like(self.P)
        for p in parts[1:]:
            dP += p
        dP = dP.flip(1) if self.reverse else dP
        return self.dqv.to(self.in_dtypes[0]), dP.to(self.in_dtypes[1])


class LowRankTiles:
    """Per-tile forward and backward of ``left_i . right_j`` (:class:`LowRankBias`) for the tiled
    ops: the same interface as :class:`ToeplitzTiles`. A tile's rows of ``left`` are copied to one
    ``[G tq, r]`` block (rows of different (batch, head) pairs are ``T`` rows apart), so the tile
    is a single 2-D matmul whichever group it belongs to. ``reverse``: tile columns hold keys in
    reverse order (``right`` is read flipped). ``dleft`` rows are written once each."""

    def __init__(self, left: torch.Tensor, right: torch.Tensor, *, reverse: bool = False,
                 need_grad: bool = False, dtype: torch.dtype | None = None):
        self.in_dtype = left.dtype
        dtype = dtype or left.dtype
        self.left = left.to(dtype).contiguous()                      # [B, H, T, r]
        right = right.to(dtype)
        self.right = (right.flip(0) if reverse else right).contiguous()   # [T, r]
        self.T, self.r = self.left.shape[-2], self.left.shape[-1]
        self.reverse = reverse
        self.dleft = torch.empty_like(self.left) if need_grad else None

    def _keys(self, ke):
        k0 = self.T - ke if self.reverse else 0          # the tile's ke key columns
        return self.right[k0:k0 + ke]                                          # [ke, r]

    def add(self, S, b0, b1, h0, h1, s, e, ke, alpha=1.0):
        """S[G, tq, ke] += alpha * (left_i . right_j) over the tile's pairs."""
        G, tq = S.shape[0], e - s
        L = scratch("lowrank.L", (G, tq, self.r), S.dtype, S.device)
        L.copy_(flat(self.left, b0, b1, h0, h1)[:, s:e])
        S.view(G * tq, ke).addmm_(L.view(G * tq, self.r), self._keys(ke).T, alpha=alpha)

    def grad(self, dL, b0, b1, h0, h1, s, e, ke):
        """Write the gradient of ``left``'s rows s..e-1 of the group from the tile's logit
        gradient dL [G, tq, ke]."""
        G, tq = dL.shape[0], e - s
        dLt = scratch("lowrank.dL", (G, tq, self.r), dL.dtype, dL.device)
        torch.mm(dL.reshape(G * tq, ke), self._keys(ke), out=dLt.view(G * tq, self.r))
        flat(self.dleft, b0, b1, h0, h1)[:, s:e].copy_(dLt)

    def grads(self):
        """-> (dleft [B, H, T, r] in left's dtype, None: ``right`` is constant)."""
        return self.dleft.to(self.in_dtype), None


def bias_inputs(bias_fn, T: int, Tk: int, col: torch.Tensor | None = None):
    """The bias inputs of a tiled op's autograd Function: -> (bias, col, qv, P). A hook with a
    tiled form (:func:`tiled_bias`) gives ``qv`` and ``P`` (or ``left`` and ``right``), its
    per-key ``content`` added to ``col``; otherwise the dense ``bias_fn(0, T)`` is called once
    (the full [.., T, Tk] bias exists in training anyway; its gradient flows back through
    whatever made it)."""
    rb = tiled_bias(bias_fn, T, Tk)
    if rb is not None:
        if rb.content is not None:
            col = rb.content if col is None else col + rb.content
        if isinstance(rb, LowRankBias):
            if rb.right.requires_grad:        # the tiles return no gradient for it
                raise ValueError("LowRankBias.right must be constant (no gradient): put what "
                                 "carries a gradient in left")
            return None, col, rb.left, rb.right
        return None, col, rb.qv, rb.P
    bias = None if bias_fn is None else bias_fn(0, T)[..., :Tk]
    return bias, col, None, None


def as_4d(bias: torch.Tensor, H: int, T: int, Tk: int | None = None) -> torch.Tensor:
    """A bias broadcastable to [B, H, T, Tk] as a [Bb, H, T, Tk] view (Bb = 1 or B), no copy."""
    while bias.dim() < 4:
        bias = bias.unsqueeze(0)
    return bias.expand(bias.shape[0], H, T, T if Tk is None else Tk)


def reduce_to(grad4: torch.Tensor, shape) -> torch.Tensor:
    """Sum a [Bb, H, T, T] gradient down to the broadcast shape the bias came in."""
    lead = grad4.dim() - len(shape)
    g = grad4.sum(dim=tuple(range(lead))) if lead else grad4
    dims = tuple(i for i, n in enumerate(shape) if n == 1 and g.shape[i] != 1)
    return (g.sum(dim=dims, keepdim=True) if dims else g).reshape(shape)


class BiasGrad:
    """Bias-gradient accumulator [Bb, H, T, Tk] (in the op's key order) for tile groups on worker
    threads: a bias shared over the batch (Bb = 1) gets contributions from groups of different
    batch indices, so each thread accumulates into its own tensor and :meth:`total` sums them."""

    def __init__(self, shape, dtype, device):
        self.shape, self.dtype, self.device = shape, dtype, device
        self.parts: dict[int, torch.Tensor] = {}

    def add(self, dL, g, t):
        """Add tile ``t`` of group ``g``'s logit gradient dL [G, tq, ke]."""
        part = self.parts.get(threading.get_ident())
        if part is None:
            part = torch.zeros(self.shape, dtype=self.dtype, device=self.device)
            self.parts[threading.get_ident()] = part
        dL4 = dL.view(g.b1 - g.b0, g.h1 - g.h0, t.e - t.s, t.ke)
        if part.shape[0] == 1:
            part[0, g.h0:g.h1, t.s:t.e, t.k0:t.k1] += dL4.sum(0) if dL4.shape[0] > 1 else dL4[0]
        else:
            part[g.b0:g.b1, g.h0:g.h1, t.s:t.e, t.k0:t.k1] += dL4

    def total(self) -> torch.Tensor:
        parts = list(self.parts.values())
        if not parts:
            return torch.zeros(self.shape, dtype=self.dtype, device=self.device)
        out = parts[0]
        for p in parts[1:]:
            out += p
        return out


class TileTerms:
    """The additive logit terms of one tiled op call (module docstring), in the op's compute
    dtype: ``bias`` (broadcastable to [B, H, T, Tk]), ``col`` ([B, H, Tk]) and the relative term
    ``qv``, ``P`` (:class:`ToeplitzTiles`, or ``left``, ``right``: :class:`LowRankTiles`); any
    may be None.

    ``reverse``: the op stores keys in reverse order (the terms are read, and their gradients
    returned, in the caller's order). ``center_col``: each tile adds ``col`` minus its value at
    the tile's first query row, a row constant that drops out of the softmax and keeps the added
    values small near the diagonal, where the weights are (FoT's column, a running sum of log
    forget gates, grows with T)."""

    def __init__(self, bias, col, qv, P, *, H: int, T: int, Tk: int, dtype, need_grad: bool,
                 reverse: bool = False, center_col: bool = False):
        self.bias_shape = None if bias is None else bias.shape
        self.bias4 = None if bias is None else as_4d(bias.to(dtype), H, T, Tk)
        if self.bias4 is not None and reverse:
            self.bias4 = self.bias4.flip(-1)           # column Tk-1-c of the flipped map: key c
        self.col_dtype = None if col is None else col.dtype
        if col is not None:
            col = col.to(dtype)
            col = (col.flip(-1) if reverse else col).contiguous()         # [B, H, Tk]
        self.col = col
        # a 3-D P is a Toeplitz table (RelativeBias), a 2-D one constant key features (LowRankBias)
        rel = ToeplitzTiles if P is not None and P.dim() == 3 else LowRankTiles
        self.rel = (None if qv is None else
                    rel(qv, P, reverse=reverse, need_grad=need_grad, dtype=dtype))
        self.empty = bias is None and col is None and qv is None
        self.reverse, self.center_col = reverse, center_col
        self.dbias = self.dcol = None
        self.need_rel = False

    def add(self, S, g, t) -> None:
        """S [G, tq, ke] += log2(e) (col + relative term + bias) over tile ``t`` of group ``g``
        (:class:`lengen.ops.cpu_tiles.TileGroup`); logits are in base-2 units (``LOG2E``)."""
        if self.col is not None:
            cg = g.flat(self.col).unsqueeze(1)                            # [G, 1, Tk]
            c = cg[:, :, t.k0:t.k1]
            S.add_(c - cg[:, :, t.s:t.s + 1] if self.center_col else c, alpha=LOG2E)
        if self.rel is not None:
            self.rel.add(S, g.b0, g.b1, g.h0, g.h1, t.s, t.e, t.ke, alpha=LOG2E)
        if self.bias4 is not None:
            bb = self.bias4[g.b0:g.b1] if self.bias4.shape[0] > 1 else self.bias4
            S.view(-1, g.h1 - g.h0, t.e - t.s, t.ke).add_(
                bb[:, g.h0:g.h1, t.s:t.e, t.k0:t.k1], alpha=LOG2E)

    def want_grads(self, *, bias: bool, col: bool, rel: bool) -> None:
        """Before backward: which gradients to accumulate (the op's ``ctx.needs_input_grad``).
        The row-constant shift of ``center_col`` gets ``sum_j dL_ij = 0`` per row: no term."""
        b4 = self.bias4
        self.dbias = BiasGrad(b4.shape, b4.dtype, b4.device) if bias and b4 is not None else None
        self.dcol = torch.zeros_like(self.col) if col and self.col is not None else None
        self.need_rel = rel and self.rel is not None

    def grad(self, dL, g, t) -> None:
        """Accumulate the gradients from tile ``t``'s logit gradient dL [G, tq, ke]."""
        if self.dbias is not None:
            self.dbias.add(dL, g, t)
        if self.dcol is not None:
            g.flat(self.dcol)[:, t.k0:t.k1] += dL.sum(1)
        if self.need_rel:
            self.rel.grad(dL, g.b0, g.b1, g.h0, g.h1, t.s, t.e, t.ke)

    def grads(self):
        """-> (dbias, dcol, dqv, dP) after every tile's :meth:`grad`, None where not asked for
        (dP always None for the low-rank form: its key features are constant), in the caller's
        key order and the shapes (col, qv, P: also dtypes) they came in."""
        dbias = dcol = dqv = dP = None
        if self.dbias is not None:
            d = self.dbias.total()
            dbias = reduce_to(d.flip(-1) if self.reverse else d, self.bias_shape)
        if self.dcol is not None:
            dcol = (self.dcol.flip(-1) if self.reverse else self.dcol).to(self.col_dtype)
        if self.need_rel:
            dqv, dP = self.rel.grads()
        return dbias, dcol, dqv, dP
