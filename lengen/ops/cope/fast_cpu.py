"""CoPE attention for CPU training: a tiled autograd Function with a hand-written backward.

Same maths and signature as :func:`lengen.ops.cope.naive.cope_attention_naive` (tested equal to
it, values and the gradients of q, k, v, the position embeddings and the bias). Tiles as in
:mod:`lengen.ops.cpu_tiles` (a few heads x a block of query rows x the keys they can see).

* **Keys in reverse order.** k and v are flipped once (``[B, H, T, hd]``, cheap), so in a tile
  column ``c`` holds key ``e - 1 - c``: the contextual position ``p_ij = sum_{t=j..i} g_it`` is a
  plain forward ``cumsum`` of the gates (the future keys, now the leftmost columns, have gate 0),
  summed from the query outwards in the same order as the reference's flip-cumsum-flip.
* **Scale folded in.** With ``S' = scale q.k`` and ``z' = scale q.e`` (``[.., T, npos]``, made once
  for all rows), the logits are ``S' + z'[lo] + w (z'[lo+1] - z'[lo])``, ``lo = trunc(p)``,
  ``w = frac(p)`` (p >= 0). Two gathers from per-row tables ``z'`` and ``b = z'[n+1] - z'[n]``
  (``b[npos-1] = 0``: a clamped position has ``w = 0`` and no gradient, as ``clamp`` gives).
* **Backward** (``E``, ``g (1 - g)``, the bucket index, ``w`` and ``b[lo]`` kept from forward):
  ``dL = E (dO v^T - delta) / l`` as in the softmax op; the position gradient ``dL b[lo]``
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

import threading

import torch

from lengen.ops.cpu_tiles import (BIG, LOG2E, BiasGrad, as_4d, exp2_floor, flat, group_offsets,
                                  group_target, max_tile_numel, plan_tiles, pool_give, pool_take,
                                  reduce_to, run_groups, scratch, with_ones)
from lengen.ops.cope import rows as cope_rows
from lengen.ops.cope.naive import cope_attention_naive
from lengen.ops.tile_bias import ToeplitzTiles, tiled_bias

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


class _RevBiasGrad(BiasGrad):
    """Bias gradient of reversed tiles: tile column c of block (s, e) is key e - 1 - c, kept in
    a key-reversed [Bb, H, T, T] accumulator (flipped back by the caller)."""

    def add(self, dL, b0, b1, h0, h1, s, e, ke):
        part = self.parts.get(threading.get_ident())
        if part is None:
            part = torch.zeros(self.shape, dtype=self.dtype, device=self.device)
            self.parts[threading.get_ident()] = part
        T = self.shape[-1]
        dL4 = dL.view(b1 - b0, h1 - h0, e - s, ke)
        if part.shape[0] == 1:
            part[0, h0:h1, s:e, T - ke:] += dL4.sum(0)
        else:
            part[b0:b1, h0:h1, s:e, T - ke:] += dL4


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
        # bias in reversed key order: column T-1-c of the flipped map is key c
        bias4 = None if bias is None else as_4d(bias.to(dt), H, T, T).flip(-1)
        tiles = plan_tiles(B, H, T, causal=True, budget=budget, qblock=qblock,
                           min_groups=group_target())
        offsets = group_offsets(tiles)
        ntot = offsets[-1]
        need_grad = any(ctx.needs_input_grad[:5]) or any(ctx.needs_input_grad[8:])
        # per-key bias and relative-position term (lengen.ops.tile_bias), in reversed key order
        colr = None if col is None else col.to(dt).flip(-1).contiguous()      # [B, H, T]
        rel = (None if rqv is None else
               ToeplitzTiles(rqv, rP, reverse=True, need_grad=need_grad, dtype=dt))
        # C row kernels (CPU tensors only: they take raw pointers), or None: the PyTorch ops below
        lib = cope_rows.kernels() if dev.type == "cpu" else None
        # per-tile buffers (name -> dtype), kept for backward when it will run: numerators E,
        # g (1 - g) and, with the C kernels, the positions; otherwise the interpolation weight w,
        # b[lo] and the bucket index lo
        kinds = ({"E": dt, "Gp": dt, "P": dt} if lib is not None else
                 {"E": dt, "Gp": dt, "W": dt, "Y": dt, "I": torch.int64})
        if need_grad:
            bufs = {nm: pool_take(ntot, kind, dev) for nm, kind in kinds.items()}
        ol = torch.empty(B, H, T, dv_ + 1, dtype=dt, device=dev)
        nmax = max_tile_numel(tiles)
        floor = exp2_floor(dt)
        top = float(npos - 1)

        def group(gi):
            (b0, b1, h0, h1), blocks = tiles[gi]
            qg, krg, vrg, zg, bg, olg = (flat(x, b0, b1, h0, h1) for x in (q, kr, vr, z2, bz, ol))
            krt = krg.transpose(1, 2)
            cg = None if colr is None else flat(colr, b0, b1, h0, h1).unsqueeze(1)   # [G, 1, T]
            off = offsets[gi]
            for s, e, ke in blocks:
                tq = e - s
                shp = (qg.shape[0], tq, ke)
                n = shp[0] * tq * ke
                S = scratch("cope.S", (nmax,), dt, dev)[:n].view(shp)
                if need_grad:
                    t = {nm: buf[off:off + n].view(shp) for nm, buf in bufs.items()}
                    off += n
                else:
                    t = {nm: scratch(f"cope.{nm}", (nmax,), kind, dev)[:n].view(shp)
                         for nm, kind in kinds.items()}
                E, Gp = t["E"], t["Gp"]
                keep, addm = _rev_masks(tq, dt, dev)
                torch.baddbmm(S, qg[:, s:e], krt[:, :, T - e:], beta=0, alpha=scale, out=S)
                torch.sigmoid(S, out=Gp)
                if lib is not None:
                    # one pass per row: positions, interpolated logits (base 2), g (1 - g)
                    cope_rows.forward(lib, S, Gp, t["P"], zg[:, s:e], bg[:, s:e], npos - 1)
                else:
                    P = scratch("cope.Pos", (nmax,), dt, dev)[:n].view(shp)
                    X = scratch("cope.X", (nmax,), dt, dev)[:n].view(shp)
                    W, Y, Ix = t["W"], t["Y"], t["I"]
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
                if bias4 is not None:
                    bb = bias4[b0:b1] if bias4.shape[0] > 1 else bias4
                    S.view(-1, h1 - h0, tq, ke).add_(bb[:, h0:h1, s:e, T - ke:], alpha=LOG2E)
                if cg is not None:
                    S.add_(cg[:, :, T - ke:], alpha=LOG2E)
                if rel is not None:
                    rel.add(S, b0, b1, h0, h1, s, e, ke, alpha=LOG2E)
                m = S.amax(-1, keepdim=True)
                torch.sub(S, m, out=E).clamp_(floor, 0.0).exp2_()
                E[:, :, :tq].mul_(keep)                                    # future: exactly 0
                torch.sum(E, -1, keepdim=True, out=olg[:, s:e, dv_:])
                torch.bmm(E, vrg[:, T - e:], out=olg[:, s:e, :dv_])

        run_groups(group, len(tiles))
        l_all = ol[..., dv_:]
        out = ol[..., :dv_] / l_all
        if need_grad:
            ctx.save_for_backward(q, kr, vr, pe, out, l_all, bz)
            ctx.bufs, ctx.lib = bufs, lib
            ctx.tiles, ctx.offsets, ctx.scale, ctx.npos = tiles, offsets, scale, npos
            ctx.bias_shape = None if bias is None else bias.shape
            ctx.bias_batch = None if bias4 is None else bias4.shape[0]
            ctx.pe_dtype = pos_emb.dtype
            ctx.col_dtype = None if col is None else col.dtype
            ctx.rel = rel
        return out

    @staticmethod
    def backward(ctx, dout):
        if ctx.bufs is None:
            raise RuntimeError("cope fast_cpu path: backward called twice (retain_graph / double "
                               "backward); use attention impl='naive' for that")
        q, kr, vr, pe, out, l_all, bz = ctx.saved_tensors
        bufs, ctx.bufs, lib = ctx.bufs, None, ctx.lib
        tiles, offsets, scale, npos = ctx.tiles, ctx.offsets, ctx.scale, ctx.npos
        B, H, T, _ = q.shape
        dv_ = out.shape[-1]
        dt, dev = q.dtype, q.device
        dout = dout.contiguous()
        v1 = with_ones(vr)
        do1 = torch.cat([dout, (dout * out).sum(-1, keepdim=True).neg_()], -1).div_(l_all)
        dq = torch.empty_like(q)
        dkr = torch.zeros_like(kr)
        dvr = torch.zeros(B, H, T, dv_, dtype=dt, device=dev)
        da = torch.zeros(B, H, T, npos, dtype=dt, device=dev)   # C: dz'; else sum of dL per bucket
        dbw = None if lib is not None else torch.zeros_like(da)  # sum of dL w per bucket
        need_bias = ctx.bias_shape is not None and ctx.needs_input_grad[4]
        dbias = _RevBiasGrad((ctx.bias_batch, H, T, T), dt, dev) if need_bias else None
        need_col = ctx.col_dtype is not None and ctx.needs_input_grad[8]
        dcolr = torch.zeros(B, H, T, dtype=dt, device=dev) if need_col else None
        rel, ctx.rel = ctx.rel, None
        need_rel = rel is not None and any(ctx.needs_input_grad[9:])
        nmax = max_tile_numel(tiles)

        def group(gi):
            (b0, b1, h0, h1), blocks = tiles[gi]
            qg, krg, vg, dog, dqg, dkg, dvg, dag, bg = (
                flat(x, b0, b1, h0, h1) for x in (q, kr, v1, do1, dq, dkr, dvr, da, bz))
            dbg = None if dbw is None else flat(dbw, b0, b1, h0, h1)
            vgt, dog_v = vg.transpose(1, 2), dog[..., :dv_]
            dcg = None if dcolr is None else flat(dcolr, b0, b1, h0, h1)
            off = offsets[gi]
            for s, e, ke in blocks:
                tq = e - s
                shp = (qg.shape[0], tq, ke)
                n = shp[0] * tq * ke
                t = {nm: buf[off:off + n].view(shp) for nm, buf in bufs.items()}
                off += n
                E, Gp = t["E"], t["Gp"]
                dL = scratch("cope.dL", (nmax,), dt, dev)[:n].view(shp)
                torch.bmm(dog[:, s:e], vgt[:, :, T - e:], out=dL).mul_(E)     # dlogits
                if need_bias:
                    dbias.add(dL, b0, b1, h0, h1, s, e, ke)
                if dcg is not None:
                    dcg[:, T - ke:] += dL.sum(1)
                if need_rel:
                    rel.grad(dL, b0, b1, h0, h1, s, e, ke)
                if lib is not None:
                    # one pass per row: z' gradient into dag, dL -> d S' in place
                    cope_rows.backward(lib, dL, Gp, t["P"], bg[:, s:e], dag[:, s:e])
                    C = dL
                else:
                    W, Y, Ix = t["W"], t["Y"], t["I"]
                    T1 = scratch("cope.T1", (nmax,), dt, dev)[:n].view(shp)
                    C = scratch("cope.C", (nmax,), dt, dev)[:n].view(shp)
                    dag[:, s:e].scatter_add_(-1, Ix, dL)
                    dbg[:, s:e].scatter_add_(-1, Ix, torch.mul(dL, W, out=T1))
                    torch.mul(dL, Y, out=T1)                                   # d position
                    torch.cumsum(T1, -1, out=C)                                # reverse cumsum:
                    torch.sub(C[:, :, -1:], C, out=C).add_(T1)                 # sum_{c' >= c}
                    C.mul_(Gp).add_(dL)                                        # d S'
                torch.baddbmm(dqg[:, s:e], C, krg[:, T - e:], beta=0, alpha=scale,
                              out=dqg[:, s:e])
                dkg[:, T - e:].baddbmm_(C.transpose(1, 2), qg[:, s:e], alpha=scale)
                dvg[:, T - e:].baddbmm_(E.transpose(1, 2), dog_v[:, s:e])

        run_groups(group, len(tiles))
        for buf in bufs.values():
            pool_give(buf)
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
        dbias_out = None
        if need_bias:
            dbias_out = reduce_to(dbias.total().flip(-1), ctx.bias_shape)
        dcol = None if dcolr is None else dcolr.flip(-1).to(ctx.col_dtype)
        dqv = dP = None
        if need_rel:
            dqv, dP = rel.grads()
        return (dq, dkr.flip(-2), dvr.flip(-2), dpe.to(ctx.pe_dtype), dbias_out,
                None, None, None, dcol, dqv, dP)


def cope_attention_fast_cpu(q, k, v, pos_emb, *, bias_fn=None, scale=None, return_weights=False,
                            budget: int | None = None, qblock: int | None = None):
    """Drop-in for ``cope_attention_naive`` (q, k, v: [B, H, T, hd]; pos_emb [hd, npos] or
    [H, hd, npos]). ``bias_fn(0, T)`` is called once; its gradient flows back. A ``bias_fn`` with a
    tiled form (:func:`lengen.ops.tile_bias.tiled_bias`) is evaluated per tile instead."""
    if return_weights or q.dtype not in (torch.float32, torch.float64):
        return cope_attention_naive(q, k, v, pos_emb, bias_fn=bias_fn, scale=scale,
                                    return_weights=return_weights)
    T = q.shape[-2]
    if k.shape[-2] != T:
        raise ValueError("fast_cpu cope attention needs as many keys as queries")
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    bias = col = rqv = rP = None
    rb = tiled_bias(bias_fn, T, T)
    if rb is not None:                         # relative term per tile, per-key part as col
        rqv, rP, col = rb.qv, rb.P, rb.content
    elif bias_fn is not None:
        bias = bias_fn(0, T)[..., :T]
    return _CoPEFastCPU.apply(q, k, v, pos_emb, bias, scale, budget, qblock, col, rqv, rP)
