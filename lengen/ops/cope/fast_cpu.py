"""CoPE attention for CPU training: a tiled autograd Function with a hand-written backward.

Same maths and signature as :func:`lengen.ops.cope.naive.cope_attention_naive` (tested equal to
it, values and the gradients of q, k, v, the position embeddings and the bias). It runs the
shared tile loop of :class:`lengen.ops.cpu_tiles.TiledAttention` (a few heads x a block of query
rows x the keys they can see; softmax tail and backward matmuls) with its own scores and their
backward (``score_grad``):

* **Keys in reverse order.** k and v are flipped once (``[B, H, T, hd]``, cheap), so in a tile
  column ``c`` holds key ``e - 1 - c``: the contextual position ``p_ij = sum_{t=j..i} g_it`` is a
  plain forward ``cumsum`` of the gates (the future keys, now the leftmost columns, have gate 0),
  summed from the query outwards in the same order as the reference's flip-cumsum-flip.
* **Scale folded in.** With ``S' = scale q.k`` and ``z' = scale q.e`` (``[.., T, npos]``, made once
  for all rows), the logits are ``S' + z'[lo] + w (z'[lo+1] - z'[lo])``, ``lo = trunc(p)``,
  ``w = frac(p)`` (p >= 0). Two gathers from per-row tables ``z'`` and ``b = z'[n+1] - z'[n]``
  (``b[npos-1] = 0``: a clamped position has ``w = 0`` and no gradient, as ``clamp`` gives).
* **Backward** (``E``, ``g (1 - g)``, the bucket index, ``w`` and ``b[lo]`` kept from forward):
  ``dL = E (dO v^T - delta) / l`` from the shared loop; the position gradient ``dL b[lo]``
  reverse-cumsummed gives the gate gradient, times ``g (1 - g)`` plus ``dL`` the score gradient;
  ``dz'`` is two ``scatter_add`` of ``dL`` and ``dL w`` into the ``npos`` buckets.

* **Row kernels in C** (``cope_rows.c`` via :mod:`lengen.ops.cope.rows`, built at first use by
  :mod:`lengen.ops.ckernels`): ATen runs ``cumsum``, ``gather`` and ``scatter_add_`` as scalar
  loops, so the per-row position logic (running gate sum, interpolated lookup, bucket sums and
  the reverse sum of the backward) is one C pass per row instead. Positions are monotone along a
  reversed row, so a bucket's gradient is a difference of running sums (no scatter). Without a C
  compiler (or with ``LENGEN_C_KERNELS=0``) the PyTorch ops above run instead, same values; both
  paths are tested against the reference.

bf16/fp16 inputs and ``return_weights`` use the dense reference. Double backward is not supported.
"""
from __future__ import annotations

import torch

from lengen.ops.cope import rows as cope_rows
from lengen.ops.cope.naive import cope_attention_naive
from lengen.ops.cpu_tiles import BIG, LOG2E, TiledAttention, exp2_floor, numerators
from lengen.ops.fused_rows import fused_applies, fused_attention
from lengen.ops.tile_bias import TileTerms, bias_inputs

_rmasks: dict = {}


def _rev_masks(tq: int, dtype, device):
    """[tq, tq] masks of a reversed tile's leading square (column c = key e-1-c, row r = query
    e-tq+r): 1/0 keep mask and 0/-BIG additive mask; key > query where c < tq - 1 - r."""
    key = (tq, dtype, torch.device(device))
    m = _rmasks.get(key)
    if m is None:
        keep = torch.ones(tq, tq, dtype=dtype, device=device).tril_().flip(-1).contiguous()
        m = (keep, (1 - keep) * -BIG)
        if len(_rmasks) > 256:
            _rmasks.clear()
        _rmasks[key] = m
    return m


class _CoPEFastCPU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, pos_emb, bias, scale, budget, qblock, col, rqv, rP):
        B, H, T, _ = q.shape
        dt, dev, dv_ = q.dtype, q.device, v.shape[-1]
        npos = pos_emb.shape[-1]
        q = q.contiguous()
        kr, vr = k.flip(-2).contiguous(), v.flip(-2).contiguous()          # key order reversed
        pe = pos_emb.to(dt)
        z = (q @ pe).mul_(scale).contiguous()                              # [B, H, T, npos]
        bz = torch.zeros_like(z)
        torch.sub(z[..., 1:], z[..., :-1], out=bz[..., :-1])               # b[npos-1] = 0
        z2 = z * LOG2E                                   # z' in base-2 units (cpu_tiles.LOG2E)
        need_grad = any(ctx.needs_input_grad[:5]) or any(ctx.needs_input_grad[8:])
        # bias, per-key column and relative-position term, read in reversed key order
        terms = TileTerms(bias, col, rqv, rP, H=H, T=T, Tk=T, dtype=dt, need_grad=need_grad,
                          reverse=True)
        # C row kernels (CPU tensors only: they take raw pointers), or None: the PyTorch ops below
        lib = cope_rows.kernels() if dev.type == "cpu" else None
        # per-tile buffers (name -> dtype), kept for backward when it will run: numerators E,
        # g (1 - g) and, with the C kernels, the positions; otherwise the interpolation weight w,
        # b[lo] and the bucket index lo
        kinds = ({"E": dt, "Gp": dt, "P": dt} if lib is not None else
                 {"E": dt, "Gp": dt, "W": dt, "Y": dt, "I": torch.int64})
        ta = TiledAttention(B, H, T, reverse=True, budget=budget, qblock=qblock, buffers=kinds,
                            keep=need_grad, device=dev, name="cope")
        floor = exp2_floor(dt)
        top = float(npos - 1)

        def tile_fn(g):
            qg, krt, zg, bg = g.flat(q), g.flat(kr).transpose(1, 2), g.flat(z2), g.flat(bz)

            def tile(t, bufs):
                s, e = t.s, t.e
                tq = e - s
                S = g.scratch("cope.S", t, dt)
                E, Gp = bufs["E"], bufs["Gp"]
                keep, addm = _rev_masks(tq, dt, dev)
                torch.baddbmm(S, qg[:, s:e], krt[:, :, t.k0:t.k1], beta=0, alpha=scale, out=S)
                torch.sigmoid(S, out=Gp)
                if lib is not None:
                    # one pass per row: positions, interpolated logits (base 2), g (1 - g)
                    cope_rows.forward(lib, S, Gp, bufs["P"], zg[:, s:e], bg[:, s:e], npos - 1)
                else:
                    P = g.scratch("cope.Pos", t, dt)
                    X = g.scratch("cope.X", t, dt)
                    W, Y, Ix = bufs["W"], bufs["Y"], bufs["I"]
                    Gp[:, :, :tq].mul_(keep)                               # future gates: 0
                    torch.cumsum(Gp, -1, out=P).clamp_(max=top)           # positions
                    Ix.copy_(P)                                            # trunc = floor, p >= 0
                    torch.frac(P, out=W)
                    torch.gather(zg[:, s:e], -1, Ix, out=X)                # base 2
                    torch.gather(bg[:, s:e], -1, Ix, out=Y)                # natural (backward)
                    # logits in base-2 units: (S' + z'[lo] + w b[lo]) log2 e, exp2 below
                    torch.add(X, S, alpha=LOG2E, out=S).addcmul_(W, Y, value=LOG2E)
                    Gp.addcmul_(Gp, Gp, value=-1.0)                       # g (1 - g)
                S[:, :, :tq].add_(addm)
                terms.add(S, g, t)
                numerators(S, S.amax(-1, keepdim=True), E, floor)
                E[:, :, :tq].mul_(keep)                                    # future: exactly 0
            return tile

        ol = torch.empty(B, H, T, dv_ + 1, dtype=dt, device=dev)         # [E v, rowsum E]
        l_all = ol[..., dv_:]
        ta.forward(vr, tile_fn, ol[..., :dv_], l_all)
        out = ol[..., :dv_] / l_all
        if need_grad:
            ctx.save_for_backward(q, kr, vr, pe, out, l_all, bz)
            ctx.ta, ctx.terms, ctx.lib = ta, terms, lib
            ctx.scale, ctx.npos, ctx.pe_dtype = scale, npos, pos_emb.dtype
        return out

    @staticmethod
    def backward(ctx, dout):
        q, kr, vr, pe, out, l_all, bz = ctx.saved_tensors
        terms, ta, lib, scale, npos = ctx.terms, ctx.ta, ctx.lib, ctx.scale, ctx.npos
        B, H, T, _ = q.shape
        dt, dev = q.dtype, q.device
        da = torch.zeros(B, H, T, npos, dtype=dt, device=dev)   # C: dz'; else sum of dL per bucket
        dbw = None if lib is not None else torch.zeros_like(da)  # sum of dL w per bucket
        needs = ctx.needs_input_grad
        terms.want_grads(bias=needs[4], col=needs[8], rel=any(needs[9:]))

        def score_grad(g):
            """The position logic's backward: dL -> the gradient of the scaled score S'."""
            dag, bg = g.flat(da), g.flat(bz)

            def tile(t, dL, bufs):
                s, e = t.s, t.e
                if lib is not None:
                    # one pass per row: z' gradient into dag, dL -> d S' in place
                    cope_rows.backward(lib, dL, bufs["Gp"], bufs["P"], bg[:, s:e], dag[:, s:e])
                    return dL
                W, Y, Ix = bufs["W"], bufs["Y"], bufs["I"]
                T1 = g.scratch("cope.T1", t, dt)
                C = g.scratch("cope.C", t, dt)
                dag[:, s:e].scatter_add_(-1, Ix, dL)
                g.flat(dbw)[:, s:e].scatter_add_(-1, Ix, torch.mul(dL, W, out=T1))
                torch.mul(dL, Y, out=T1)                                   # d position
                torch.cumsum(T1, -1, out=C)                                # reverse cumsum:
                torch.sub(C[:, :, -1:], C, out=C).add_(T1)                 # sum_{c' >= c}
                return C.mul_(bufs["Gp"]).add_(dL)                         # d S'
            return tile

        dq, dkr, dvr = ta.backward(q, kr, vr, out, l_all, dout, scale, terms,
                                   score_grad=score_grad)
        # z' = scale q e; E interp = z'[lo] + w (z'[lo+1] - z'[lo]), b[npos-1] = 0 constant
        dz = da
        if dbw is not None:
            dz[..., :-1] -= dbw[..., :-1]
            dz[..., 1:] += dbw[..., :-1]
        dz.mul_(scale)
        dq += dz @ pe.transpose(-1, -2)
        if pe.dim() == 2:
            dpe = torch.einsum("bhtd,bhtn->dn", q, dz)
        else:
            dpe = torch.einsum("bhtd,bhtn->hdn", q, dz)
        dbias, dcol, dqv, dP = terms.grads()
        return (dq, dkr.flip(-2), dvr.flip(-2), dpe.to(ctx.pe_dtype), dbias,
                None, None, None, dcol, dqv, dP)


def cope_attention_fast_cpu(q, k, v, pos_emb, *, bias_fn=None, scale=None, return_weights=False,
                            budget: int | None = None, qblock: int | None = None, rows=None):
    """Drop-in for ``cope_attention_naive`` (q, k, v: [B, H, T, hd]; pos_emb [hd, npos] or
    [H, hd, npos]). ``bias_fn(0, T)`` is called once; its gradient flows back. A ``bias_fn`` with a
    tiled form (:func:`lengen.ops.tile_bias.tiled_bias`) is evaluated per tile instead.
    Float32 with no tile size given (and no low-rank relative term) runs the per-row C kernel
    (:mod:`lengen.ops.fused_rows`), which does the same maths row by row; ``budget`` / ``qblock``
    select this module's tiled path. ``rows`` (bool [B, T]): the query rows whose outputs are
    read; the C kernel skips the others, the tiled path computes them all."""
    if return_weights or q.dtype not in (torch.float32, torch.float64):
        return cope_attention_naive(q, k, v, pos_emb, bias_fn=bias_fn, scale=scale,
                                    return_weights=return_weights)
    T = q.shape[-2]
    if k.shape[-2] != T:
        raise ValueError("fast_cpu cope attention needs as many keys as queries")
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    bias, col, rqv, rP = bias_inputs(bias_fn, T, T)
    pe = pos_emb.to(q.dtype)
    if budget is None and qblock is None and fused_applies(q, k, v, scale, bias, rqv, col=col,
                                                           rP=rP, pe=pe):
        # the per-row C kernel: it makes z' = scale q . e, counts positions and interpolates per
        # row, and returns the gradients of q and e
        return fused_attention(q, k, v, scale=scale, bias=bias, col=col, qv=rqv, P=rP, pe=pe,
                               rows=rows)
    return _CoPEFastCPU.apply(q, k, v, pos_emb, bias, scale, budget, qblock, col, rqv, rP)
