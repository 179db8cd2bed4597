"""TRA for CPU training: a hand-written autograd Function over cache-sized tiles.

Same maths and signature as :func:`lengen.ops.tra.naive.tra_attention_naive` (tested equal to it,
values and all gradients). The dense reference is slow on a CPU because it streams a dozen
[B, H, T, T] tensors (masks, counts, logits, softmax, autograd's saved copies) through main
memory; this path does the same arithmetic in cache-sized tiles with few passes per tile. The
tile loop, the softmax tail and the backward matmuls are shared with the other tiled ops
(:class:`lengen.ops.cpu_tiles.TiledAttention`); what is TRA's own is how a tile's scores become
logits and the gate's gradient:

* **Masks as floats.** Future keys get score 0 (``tril_`` of the tile's diagonal square), so the
  threshold mask ``S > 0`` also removes them; it is a float tile (``gt`` into a float buffer:
  bool tensors take slow scalar paths on CPU). After ``exp`` a multiply by the mask makes
  non-surviving weights exactly 0.
* **One forward cumsum.** With ``C_ij`` the inclusive running count of survivors from the left and
  ``total_i`` the row's count, a surviving key has ``Dbar_ij = total_i + 1 - C_ij``, so
  ``relu(S) + Dbar * g = S - g (C - total) + g``; the row constant ``g`` drops out of the
  softmax. ``C - total`` (``= 1 - Dbar``) is small near the query, so fp32 stays accurate.
* **Unnormalised softmax** (shared). The tile keeps ``E = exp(L - rowmax)`` and its row sums
  ``l``; the output ``E v`` is divided by ``l`` once at the end, for all tiles. Shifted logits
  are clamped above the denormal range first (:func:`lengen.ops.cpu_tiles.exp_floor`), which
  otherwise makes ``exp`` and every later product far slower. The tile holds its logits in
  base-2 units and takes ``exp2`` (:data:`lengen.ops.cpu_tiles.LOG2E`: same weights, cheaper
  than ``exp``). Both effects are measured in benchmarks/RESULTS.md, "CPU primitives".
* **No counts in backward.** ``d log_gate_i = sum_j dL_ij Dbar_ij`` equals
  ``delta_i w_i - dO_i . Z_i`` with ``delta_i = dO_i . O_i``, ``w_i = sum_j P_ij (C - total)_ij``
  and ``Z = (P o (C - total)) V``, made in the forward pass from a tile already in cache
  (derivation: ``sum_j dL_ij = 0`` and ``dL = P o (dO V^T - delta)``). Backward keeps only ``E``
  (in a pooled buffer) and recomputes nothing.
* **Backward by matmuls** (shared): ``[dO, -delta] / l @ [v, 1]^T`` gives ``(dP - delta) / l``
  in one matmul, times ``E`` it is ``dL`` (exactly 0 off the surviving keys, where ``relu``
  would block the gradient anyway); ``dq = dL k``, ``dk = dL^T q``, ``dv = E^T dO / l``.

Rows without a surviving key output exactly zero and get zero gradient. Weights below e^-60 of
their row's largest (fp32) become e^-60 times it, far below rounding. bf16/fp16 inputs use the
dense reference (which computes in fp32). Double backward is not supported (the saved numerators
go back to a buffer pool after the first backward; a second one raises).
"""
from __future__ import annotations

import torch

from lengen.ops.cpu_tiles import BIG, LOG2E, TiledAttention, exp2_floor, numerators
from lengen.ops.fused_rows import fused_applies, fused_attention
from lengen.ops.tile_bias import TileTerms, bias_inputs
from lengen.ops.tra.naive import tra_attention_naive


class _TRAFastCPU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, log_gate, bias, scale, budget, qblock, col, rqv, rP):
        B, H, T, _ = q.shape
        dt, dev, dv_ = q.dtype, q.device, v.shape[-1]
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        ng = (-log_gate).to(dt).unsqueeze(-1).contiguous()      # [B, H, T, 1], >= 0
        need_grad = any(ctx.needs_input_grad[:5]) or any(ctx.needs_input_grad[8:])
        terms = TileTerms(bias, col, rqv, rP, H=H, T=T, Tk=T, dtype=dt, need_grad=need_grad)
        ta = TiledAttention(B, H, T, budget=budget, qblock=qblock, buffers={"E": dt},
                            keep=need_grad, device=dev, name="tra")
        if need_grad:
            Z = torch.empty(B, H, T, dv_, dtype=dt, device=dev)    # (E o (C - total)) v
            w = torch.empty(B, H, T, 1, dtype=dt, device=dev)      # rowsum(E o (C - total))
        floor = exp2_floor(dt)

        def tile_fn(g):
            qg, kgt, ngg = g.flat(q), g.flat(k).transpose(1, 2), g.flat(ng)

            def tile(t, bufs):
                s, e, ke = t.s, t.e, t.ke
                S, K, C = (g.scratch(nm, t, dt) for nm in ("tra.S", "tra.K", "tra.C"))
                # logits in base-2 units (cpu_tiles.LOG2E; the threshold S > 0 is unchanged)
                torch.baddbmm(S, qg[:, s:e], kgt[:, :, :ke], beta=0, alpha=scale * LOG2E, out=S)
                S[:, :, s:].tril_()                              # future keys -> 0, i.e. not > 0
                torch.gt(S, 0, out=K)                            # 1.0 survives, 0.0 not
                torch.cumsum(K, -1, out=C)                       # survivors at 0..j
                C.sub_(C[:, :, -1:].clone())                     # C - total = 1 - Dbar on survivors
                S.addcmul_(C, ngg[:, s:e], value=LOG2E)          # S + g (Dbar - 1)
                if terms.empty:
                    # the row max of S + g (Dbar - 1) over all keys is reached at a surviving key
                    # (a non-survivor has S <= 0 and the count of the survivor left of it), so no
                    # masking is needed before the max; empty rows give some finite m.
                    m = S.amax(-1, keepdim=True)
                else:
                    terms.add(S, g, t)
                    M = torch.sub(K, 1, out=g.scratch("tra.M", t, dt))
                    m = torch.add(S, M, alpha=BIG, out=M).amax(-1, keepdim=True)  # over survivors
                # the clamp also stops overflow off the survivors; then the mask: non-surviving
                # keys get exactly 0
                E = numerators(S, m, bufs["E"], floor).mul_(K)
                if need_grad:
                    C.mul_(E)
                    torch.sum(C, -1, keepdim=True, out=g.flat(w)[:, s:e])
                    torch.bmm(C, g.flat(v)[:, :ke], out=g.flat(Z)[:, s:e])
            return tile

        out = torch.empty(B, H, T, dv_, dtype=dt, device=dev)
        l_all = torch.empty(B, H, T, 1, dtype=dt, device=dev)
        ta.forward(v, tile_fn, out, l_all)
        # row sums are >= 1 (the max term is exp(0)) unless the row is empty: 0 -> 1, 0 / 1 = 0
        l_all.clamp_min_(1.0)
        out.div_(l_all)
        if need_grad:
            Z.div_(l_all)
            w.div_(l_all)
            ctx.save_for_backward(q, k, v, out, l_all, Z, w)
            ctx.ta, ctx.terms, ctx.scale, ctx.gate_dtype = ta, terms, scale, log_gate.dtype
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, l_all, Z, w = ctx.saved_tensors
        terms = ctx.terms
        needs = ctx.needs_input_grad
        dout = dout.contiguous()
        delta = (dout * out).sum(-1, keepdim=True)              # dO . O  [B, H, T, 1]
        dg = (delta * w).squeeze(-1) - (dout * Z).sum(-1)      # d log_gate (module docstring)
        terms.want_grads(bias=needs[4], col=needs[8], rel=any(needs[9:]))
        # dL is exactly 0 off the survivors, where relu would block the gradient anyway
        dq, dk, dv = ctx.ta.backward(q, k, v, out, l_all, dout, ctx.scale, terms, delta=delta)
        dbias, dcol, dqv, dP = terms.grads()
        return dq, dk, dv, dg.to(ctx.gate_dtype), dbias, None, None, None, dcol, dqv, dP


def tra_attention_fast_cpu(q, k, v, log_gate, *, bias_fn=None, scale=None, return_weights=False,
                           budget: int | None = None, qblock: int | None = None, rows=None):
    """Drop-in for ``tra_attention_naive`` (q, k, v: [B, H, T, hd]; log_gate: [B, H, T]).

    ``bias_fn(0, T)`` is called once (the full [.., T, T] bias exists in training anyway); its
    gradient flows back through whatever made it. A ``bias_fn`` with a tiled form
    (:func:`lengen.ops.tile_bias.tiled_bias`) is evaluated per tile instead. ``return_weights``
    and bf16/fp16 inputs use the dense reference. Float32 (Transformer-XL's Toeplitz term included,
    its low-rank form not) runs the
    per-row C kernel (:mod:`lengen.ops.fused_rows`) when it is available and no tile size is
    given; ``budget`` / ``qblock`` select the tiled path. ``rows`` (bool [B, T]): the query rows
    whose outputs are read; the C kernel skips the others, the tiled path computes them all.
    """
    if return_weights or q.dtype not in (torch.float32, torch.float64):
        return tra_attention_naive(q, k, v, log_gate, bias_fn=bias_fn, scale=scale,
                                   return_weights=return_weights)
    T = q.shape[-2]
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    bias, col, rqv, rP = bias_inputs(bias_fn, T, k.shape[-2])
    if budget is None and qblock is None and fused_applies(q, k, v, scale, bias, rqv, col=col,
                                                           log_gate=log_gate, rP=rP):
        return fused_attention(q, k, v, scale=scale, bias=bias, col=col, log_gate=log_gate,
                               qv=rqv, P=rP, rows=rows)
    return _TRAFastCPU.apply(q, k, v, log_gate, bias, scale, budget, qblock, col, rqv, rP)
