"""Softmax attention with an additive bias for CPU training: a tiled autograd Function.

Without a bias, ``F.scaled_dot_product_attention`` already runs a fused O(T)-memory kernel on CPU.
With a bias that needs a gradient (T5's table, FIRE's MLP, Transformer-XL's terms), SDPA on CPU
falls back to its unfused math path, which streams several [B, H, T, T] tensors through memory.
This op does the same maths in cache-sized tiles (:mod:`lengen.ops.cpu_tiles`) and returns the
bias gradient:

    out = softmax(q k^T * scale + bias + col[None, :], causal) v

``col`` (optional, [B, H, T]) is a per-key bias, used by forgetting attention (``col_j = -c_j``;
the per-query ``c_i`` is constant along a softmax row and drops out). Its gradient is the column
sum of the logit gradient.

Causal tiles get ``-1e30`` on future keys before the row max and exactly-zero weights there after
``exp`` (both touch only the tile's diagonal square). Logits are held in base-2 units and ``exp``
is taken as ``exp2`` (:data:`lengen.ops.cpu_tiles.LOG2E`: same weights, cheaper; measured in
benchmarks/RESULTS.md, "CPU primitives"). The rest is the shared tile loop
(:class:`lengen.ops.cpu_tiles.TiledAttention`): it keeps ``E = exp(L - rowmax)`` and its row sums
``l``, and backward recomputes nothing (the scores are the logits: ``dS = dL``).
"""
from __future__ import annotations

import torch

from lengen.ops.cpu_tiles import (LOG2E, TiledAttention, exp2_floor, future_mask,
                                  numerators)
from lengen.ops.fused_rows import fused_applies, fused_attention
from lengen.ops.softmax.chunked import softmax_attention_chunked
from lengen.ops.softmax.naive import softmax_attention_naive
from lengen.ops.tile_bias import TileTerms, bias_inputs


class _SoftmaxFastCPU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, col, scale, causal, budget, qblock, rqv, rP):
        B, H, T, _ = q.shape
        Tk = k.shape[-2]
        dt, dev, dv_ = q.dtype, q.device, v.shape[-1]
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        need_grad = any(ctx.needs_input_grad[:5]) or any(ctx.needs_input_grad[9:])
        # col minus its value at the tile's first row: FoT's column grows with T (TileTerms)
        terms = TileTerms(bias, col, rqv, rP, H=H, T=T, Tk=Tk, dtype=dt, need_grad=need_grad,
                          center_col=True)
        ta = TiledAttention(B, H, T, Tk=Tk, causal=causal, budget=budget, qblock=qblock,
                            buffers={"E": dt}, keep=need_grad, device=dev, name="softmax")
        floor = exp2_floor(dt)

        def tile_fn(g):
            qg, kgt = g.flat(q), g.flat(k).transpose(1, 2)

            def tile(t, bufs):
                s, e, ke = t.s, t.e, t.ke
                S = g.scratch("softmax.S", t, dt)
                # logits in base-2 units (cpu_tiles.LOG2E): the weights come from exp2
                torch.baddbmm(S, qg[:, s:e], kgt[:, :, :ke], beta=0, alpha=scale * LOG2E, out=S)
                terms.add(S, g, t)
                if causal:                                        # -1e30 on future keys
                    S[:, :, s:].add_(future_mask(e - s, e - s, dt, dev))
                E = numerators(S, S.amax(-1, keepdim=True), bufs["E"], floor)
                if causal:
                    E[:, :, s:].tril_()                           # future keys: exactly 0
            return tile

        # [E v, rowsum E]; the sum is separate because a matmul with v's width + 1 columns runs
        # ~1.7x slower than with 16
        ol = torch.empty(B, H, T, dv_ + 1, dtype=dt, device=dev)
        l_all = ol[..., dv_:]                                     # row sums, >= 1
        ta.forward(v, tile_fn, ol[..., :dv_], l_all)
        out = ol[..., :dv_] / l_all
        if need_grad:
            ctx.save_for_backward(q, k, v, out, l_all)
            ctx.ta, ctx.terms, ctx.scale = ta, terms, scale
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, l_all = ctx.saved_tensors
        terms = ctx.terms
        needs = ctx.needs_input_grad
        terms.want_grads(bias=needs[3], col=needs[4], rel=any(needs[9:]))
        dq, dk, dv = ctx.ta.backward(q, k, v, out, l_all, dout, ctx.scale, terms)
        dbias, dcol, dqv, dP = terms.grads()
        return dq, dk, dv, dbias, dcol, None, None, None, None, dqv, dP


def softmax_attention_fast_cpu(q, k, v, *, causal=True, bias_fn=None, scale=None,
                               return_weights=False, col_bias=None, budget: int | None = None,
                               qblock: int | None = None, rows=None, window=None, chunk=None):
    """Drop-in for ``softmax_attention_naive`` (q, k, v: [B, H, T, hd]) plus an optional per-key
    bias ``col_bias`` [B, H, Tk]. ``bias_fn(0, T)`` is called once; its gradient flows back. A
    ``bias_fn`` with a tiled form (:func:`lengen.ops.tile_bias.tiled_bias`) is evaluated per tile
    instead, never as a [.., T, Tk] tensor.
    ``return_weights`` and bf16/fp16 inputs use the dense reference (without ``col_bias``).
    Causal float32 self-attention (Transformer-XL's Toeplitz term included, its low-rank form
    not) runs the per-row C kernel
    (:mod:`lengen.ops.fused_rows`) when it is available and no tile size is given; ``budget`` /
    ``qblock`` select the tiled path. ``rows`` (bool [B, T]): the query rows whose outputs are
    read; the C kernel skips the others (:func:`lengen.ops.fused_rows.fused_attention`), the
    tiled path computes them all. ``window`` / ``chunk`` (local masks) are routed to the
    query-blocked op (:func:`lengen.ops.softmax.chunked.softmax_attention_chunked`), which reads
    only each block's visible keys (the same maths; tested equal in
    tests/test_layers_layout.py), or to the reference when weights are wanted."""
    if window is not None or chunk is not None:
        if return_weights:
            return softmax_attention_naive(q, k, v, causal=causal, bias_fn=bias_fn, scale=scale,
                                           return_weights=True, window=window, chunk=chunk)
        if col_bias is not None:
            raise NotImplementedError("col_bias with window / chunk masks")
        return softmax_attention_chunked(q, k, v, causal=causal, bias_fn=bias_fn, scale=scale,
                                         block_size=qblock or 256, window=window, chunk=chunk)
    if return_weights or q.dtype not in (torch.float32, torch.float64):
        if col_bias is not None:
            raise NotImplementedError("col_bias needs float32/float64 and no return_weights")
        return softmax_attention_naive(q, k, v, causal=causal, bias_fn=bias_fn, scale=scale,
                                       return_weights=return_weights)
    T, Tk = q.shape[-2], k.shape[-2]
    if causal and T != Tk:
        raise ValueError("causal fast_cpu softmax attention needs as many keys as queries")
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    # a tiled relative term's per-key part goes into col
    bias, col, rqv, rP = bias_inputs(bias_fn, T, Tk, col_bias)
    if budget is None and qblock is None and fused_applies(q, k, v, scale, bias, rqv, causal,
                                                           col=col, rP=rP):
        return fused_attention(q, k, v, scale=scale, bias=bias, col=col, qv=rqv, P=rP, rows=rows)
    return _SoftmaxFastCPU.apply(q, k, v, bias, col, scale, causal, budget, qblock, rqv, rP)
