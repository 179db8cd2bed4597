"""Threshold Relative Attention as fused Triton kernels (forward and backward).

Same maths as :mod:`lengen.ops.tra.naive`: ``S = q k^T * scale``; key j survives for query i when
``S_ij > 0`` and ``j <= i``; ``Dbar_ij`` counts the survivors at positions j..i; the logits
``relu(S) + Dbar * log_gate_i`` are soft-maxed over the survivors only; a row without survivors
outputs zero and receives zero gradient.

Kernel layout (one program per tile of BLOCK query rows and one (batch, head)):

* Key blocks are visited **from the diagonal leftward**, because ``Dbar_ij`` is a count of
  survivors to the *right* of j. Each row carries the number of survivors already seen in blocks
  to its right; inside a tile ``Dbar = reverse-cumsum(mask) + carry``. The causal mask is applied
  only on the diagonal tile; off-diagonal tiles need only the threshold.
* Online softmax in fp32 (exp2 space); the forward saves only the per-row log-sum-exp, so extra
  memory is O(T) and the attention matrix never exists.
* The backward recomputes each tile with the same leftward sweep (the carry again), producing
  dq and ``dlog_gate_i = sum_j dLogits_ij * Dbar_ij`` as row reductions inside the program. dk
  and dv are accumulated with fp32 atomics: a key block's contextual distances depend on every
  key block to its right, so a key-block-major pass (FlashAttention-2's dk/dv kernel) would have
  to recount those blocks per tile or store O(T^2 / BLOCK) counts. Atomic float adds make dk/dv
  reproducible only up to summation order (not bitwise deterministic on GPU).

Logits are kept in base 2 (times log2(e) = 1.4426950408889634, written as a literal inside the
kernels). With bf16/fp16 inputs, ``delta_i = rowsum(dO * O)`` uses the rounded output, as in
FlashAttention-2; that is the main error of ``dlog_gate`` (~1e-2 relative in bf16).

On CPU the kernels run under Triton's interpreter; set ``TRITON_INTERPRET=1`` before triton is
first imported. Positional-scheme biases (``bias_fn``) are not supported here: callers use
:func:`lengen.ops.tra.tra_attention_chunked` for those.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from lengen.ops.triton_host import (backward_tensors, entry_checks, forward_tensors, launch, mm,
                                    run)

__all__ = ["tra_attention_triton"]


# --------------------------------------------------------------------------------------------
# kernels
# --------------------------------------------------------------------------------------------
@triton.jit
def _tile_scores(q, K, base, start_n, offs_m, offs_n, offs_d, T, scale, cnt, lg2,
                 HD: tl.constexpr, DIAG: tl.constexpr, PREC: tl.constexpr):
    """Scores of one (query tile, key block): returns k, keep, Dbar, base-2 logits (-inf off)."""
    cols = start_n + offs_n
    k = tl.load(K + base + cols[:, None] * HD + offs_d[None, :],
                mask=(cols < T)[:, None] & (offs_d < HD)[None, :], other=0.0)
    s = mm(q, tl.trans(k), PREC) * scale                 # [BM, BN] fp32
    keep = s > 0.0
    if DIAG:  # only the diagonal tile can hold future keys
        keep = keep & (cols[None, :] <= offs_m[:, None])
    kf = keep.to(tl.float32)
    # survivors at positions j..(end of this block), plus those already counted to the right
    dbar = tl.cumsum(kf, axis=1, reverse=True) + cnt[:, None]
    z = tl.where(keep, s * 1.4426950408889634 + dbar * lg2[:, None], float("-inf"))
    return k, kf, dbar, z


@triton.jit
def _fwd_step(acc, l_i, m_i, cnt, q, lg2, K, V, base, start_n, offs_m, offs_n, offs_d, T, scale,
              HD: tl.constexpr, DIAG: tl.constexpr, PREC: tl.constexpr):
    k, kf, dbar, z = _tile_scores(q, K, base, start_n, offs_m, offs_n, offs_d, T, scale, cnt, lg2,
                                  HD, DIAG, PREC)
    cols = start_n + offs_n
    v = tl.load(V + base + cols[:, None] * HD + offs_d[None, :],
                mask=(cols < T)[:, None] & (offs_d < HD)[None, :], other=0.0)
    m_new = tl.maximum(m_i, tl.max(z, 1))
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)   # rows with no survivor yet: any finite
    alpha = tl.exp2(m_i - m_use)
    p = tl.exp2(z - m_use[:, None])                        # exactly 0 off the survivors
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + mm(p.to(v.dtype), v, PREC)
    cnt = cnt + tl.sum(kf, 1)
    return acc, l_i, m_new, cnt


@triton.jit
def _tra_fwd_kernel(Q, K, V, LG, O, LSE, T, scale,
                    HD: tl.constexpr, BLOCK: tl.constexpr, BLOCK_D: tl.constexpr,
                    PREC: tl.constexpr):
    start_m = tl.program_id(0) * BLOCK
    bh = tl.program_id(1).to(tl.int64)
    base = bh * T * HD
    offs_m = start_m + tl.arange(0, BLOCK)
    offs_n = tl.arange(0, BLOCK)
    offs_d = tl.arange(0, BLOCK_D)
    row_ok = offs_m < T
    io_mask = row_ok[:, None] & (offs_d < HD)[None, :]
    q = tl.load(Q + base + offs_m[:, None] * HD + offs_d[None, :], mask=io_mask, other=0.0)
    lg2 = tl.load(LG + bh * T + offs_m, mask=row_ok, other=0.0).to(tl.float32) * 1.4426950408889634

    m_i = tl.full([BLOCK], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK], tl.float32)
    cnt = tl.zeros([BLOCK], tl.float32)       # survivors counted so far (exact below 2^24)
    acc = tl.zeros([BLOCK, BLOCK_D], tl.float32)

    acc, l_i, m_i, cnt = _fwd_step(acc, l_i, m_i, cnt, q, lg2, K, V, base, start_m, offs_m,
                                   offs_n, offs_d, T, scale, HD, True, PREC)
    n_left = start_m // BLOCK
    for i in range(n_left):                   # key blocks right to left
        start_n = (n_left - 1 - i) * BLOCK
        acc, l_i, m_i, cnt = _fwd_step(acc, l_i, m_i, cnt, q, lg2, K, V, base, start_n, offs_m,
                                       offs_n, offs_d, T, scale, HD, False, PREC)

    has = l_i > 0.0
    out = acc / tl.where(has, l_i, 1.0)[:, None]           # empty rows: acc == 0 -> 0
    tl.store(O + base + offs_m[:, None] * HD + offs_d[None, :], out.to(O.dtype.element_ty),
             mask=io_mask)
    # base-2 log-sum-exp; empty rows store 0 (every logit is -inf there, so p == 0 anyway)
    lse = m_i + tl.log2(tl.where(has, l_i, 1.0))
    tl.store(LSE + bh * T + offs_m, tl.where(has, lse, 0.0), mask=row_ok)


@triton.jit
def _bwd_step(dq, dlg, cnt, q, do, lse, delta, lg2, K, V, DK, DV, base, start_n, offs_m, offs_n,
              offs_d, T, scale, HD: tl.constexpr, DIAG: tl.constexpr, PREC: tl.constexpr):
    k, kf, dbar, z = _tile_scores(q, K, base, start_n, offs_m, offs_n, offs_d, T, scale, cnt, lg2,
                                  HD, DIAG, PREC)
    cols = start_n + offs_n
    kv_mask = (cols < T)[:, None] & (offs_d < HD)[None, :]
    v = tl.load(V + base + cols[:, None] * HD + offs_d[None, :], mask=kv_mask, other=0.0)
    p = tl.exp2(z - lse[:, None])                                            # [BM, BN]
    dp = mm(do, tl.trans(v), PREC)
    dl = p * (dp - delta[:, None])          # d loss / d logits; zero off the survivors
    dlg += tl.sum(dl * dbar, 1)
    dq += mm(dl.to(k.dtype), k, PREC)
    # S > 0 on every survivor, so d relu(S)/dS == 1 there and dS == dLogits
    dk = mm(tl.trans(dl).to(q.dtype), q, PREC) * scale
    dv = mm(tl.trans(p).to(do.dtype), do, PREC)
    offs = base + cols[:, None] * HD + offs_d[None, :]
    tl.atomic_add(DK + offs, dk, mask=kv_mask)
    tl.atomic_add(DV + offs, dv, mask=kv_mask)
    cnt = cnt + tl.sum(kf, 1)
    return dq, dlg, cnt


@triton.jit
def _tra_bwd_kernel(Q, K, V, LG, DO, LSE, DELTA, DQ, DK, DV, DLG, T, scale,
                    HD: tl.constexpr, BLOCK: tl.constexpr, BLOCK_D: tl.constexpr,
                    PREC: tl.constexpr):
    start_m = tl.program_id(0) * BLOCK
    bh = tl.program_id(1).to(tl.int64)
    base = bh * T * HD
    offs_m = start_m + tl.arange(0, BLOCK)
    offs_n = tl.arange(0, BLOCK)
    offs_d = tl.arange(0, BLOCK_D)
    row_ok = offs_m < T
    io_mask = row_ok[:, None] & (offs_d < HD)[None, :]
    q = tl.load(Q + base + offs_m[:, None] * HD + offs_d[None, :], mask=io_mask, other=0.0)
    do = tl.load(DO + base + offs_m[:, None] * HD + offs_d[None, :], mask=io_mask, other=0.0)
    lg2 = tl.load(LG + bh * T + offs_m, mask=row_ok, other=0.0).to(tl.float32) * 1.4426950408889634
    # +inf for padding rows makes their p exactly 0
    lse = tl.load(LSE + bh * T + offs_m, mask=row_ok, other=float("inf"))
    delta = tl.load(DELTA + bh * T + offs_m, mask=row_ok, other=0.0)

    dq = tl.zeros([BLOCK, BLOCK_D], tl.float32)
    dlg = tl.zeros([BLOCK], tl.float32)
    cnt = tl.zeros([BLOCK], tl.float32)
    dq, dlg, cnt = _bwd_step(dq, dlg, cnt, q, do, lse, delta, lg2, K, V, DK, DV, base, start_m,
                             offs_m, offs_n, offs_d, T, scale, HD, True, PREC)
    n_left = start_m // BLOCK
    for i in range(n_left):
        start_n = (n_left - 1 - i) * BLOCK
        dq, dlg, cnt = _bwd_step(dq, dlg, cnt, q, do, lse, delta, lg2, K, V, DK, DV, base,
                                 start_n, offs_m, offs_n, offs_d, T, scale, HD, False, PREC)
    tl.store(DQ + base + offs_m[:, None] * HD + offs_d[None, :],
             (dq * scale).to(DQ.dtype.element_ty), mask=io_mask)
    tl.store(DLG + bh * T + offs_m, dlg, mask=row_ok)


# --------------------------------------------------------------------------------------------
# host side
# --------------------------------------------------------------------------------------------
class _TRAFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, log_gate, scale, block_size):
        cfg = launch(q, block_size, _tra_fwd_kernel)
        q, k, v, o, lse = forward_tensors(q, k, v)
        log_gate = log_gate.contiguous()
        run(_tra_fwd_kernel, cfg, q, k, v, log_gate, o, lse, q.shape[2], scale)
        ctx.save_for_backward(q, k, v, log_gate, o, lse)
        ctx.scale, ctx.cfg = scale, cfg
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, log_gate, o, lse = ctx.saved_tensors
        do, delta = backward_tensors(do, q, o)
        dq = torch.empty_like(q)
        dk = torch.zeros(q.shape, device=q.device, dtype=torch.float32)   # atomics accumulate
        dv = torch.zeros(q.shape, device=q.device, dtype=torch.float32)
        dlg = torch.empty_like(lse)
        run(_tra_bwd_kernel, ctx.cfg, q, k, v, log_gate, do, lse, delta, dq, dk, dv, dlg,
            q.shape[2], ctx.scale)
        return dq, dk.to(k.dtype), dv.to(v.dtype), dlg.to(log_gate.dtype), None, None


def tra_attention_triton(q, k, v, log_gate, *, bias_fn=None, scale=None, block_size=None):
    """TRA with fused Triton kernels; q, k, v: [B, H, T, hd] (hd <= 128), log_gate: [B, H, T].

    Returns [B, H, T, hd] in q's dtype; the softmax is accumulated in fp32. ``block_size`` (query
    and key tile edge, power of two >= 16) defaults to 64 on GPU (32 for fp32) and 32 on CPU.
    Differentiable in q, k, v and log_gate; dk/dv use fp32 atomics (not bitwise deterministic).
    """
    scale = entry_checks("tra", q, k, v, log_gate, "log_gate", _tra_fwd_kernel, bias_fn, scale)
    return _TRAFunction.apply(q, k, v, log_gate, scale, block_size)
