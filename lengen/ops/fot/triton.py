"""Forgetting attention as fused Triton kernels (forward and backward).

Same maths as :mod:`lengen.ops.fot.naive`: ``logits = q k^T * scale + c_i - c_j`` with
``c = cumsum(log_f)`` (computed once in fp32 outside the kernels), causal softmax.

* Forward: one program per tile of BLOCK query rows and one (batch, head); FlashAttention-2
  style online softmax in fp32 (exp2 space) over the key blocks left of the diagonal, then the
  diagonal block, which is the only one that applies the causal mask. Saves the per-row
  log-sum-exp only (O(T) extra memory).
* Backward: two kernels that recompute the tiles, no atomics: a key-block-major kernel for dk,
  dv and the column sums of dS, and a query-block-major kernel for dq and the row sums of dS.
  Since the bias is ``c_i - c_j``, ``dc = rowsum(dS) - colsum(dS)``, and because
  ``c_t = sum_{s<=t} log_f_s``, ``dlog_f_t = sum_{i>=t} dc_i`` (a reverse cumsum, done in torch).

On CPU the kernels run under Triton's interpreter; set ``TRITON_INTERPRET=1`` before triton is
first imported. Positional-scheme biases (``bias_fn``) are not supported here: callers use
:func:`lengen.ops.fot.fot_attention_chunked` for those.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from lengen.ops.triton_host import (backward_tensors, entry_checks, forward_tensors, launch, mm,
                                    run)

__all__ = ["fot_attention_triton"]


# --------------------------------------------------------------------------------------------
# kernels (all logits are kept in base 2: z = logits * log2(e))
# --------------------------------------------------------------------------------------------
@triton.jit
def _logits2(q, k, cq, ck, rows, cols, scale, DIAG: tl.constexpr, PREC: tl.constexpr):
    s = mm(q, tl.trans(k), PREC) * scale
    z = (s + cq[:, None] - ck[None, :]) * 1.4426950408889634
    if DIAG:  # only the diagonal tile can hold future keys
        z = tl.where(cols[None, :] <= rows[:, None], z, float("-inf"))
    return z


@triton.jit
def _fwd_step(acc, l_i, m_i, q, cq, K, V, C, base, cbase, start_n, offs_m, offs_n, offs_d, T,
              scale, HD: tl.constexpr, DIAG: tl.constexpr, PREC: tl.constexpr):
    cols = start_n + offs_n
    kv_mask = (cols < T)[:, None] & (offs_d < HD)[None, :]
    k = tl.load(K + base + cols[:, None] * HD + offs_d[None, :], mask=kv_mask, other=0.0)
    v = tl.load(V + base + cols[:, None] * HD + offs_d[None, :], mask=kv_mask, other=0.0)
    ck = tl.load(C + cbase + cols, mask=cols < T, other=0.0)
    z = _logits2(q, k, cq, ck, offs_m, cols, scale, DIAG, PREC)
    m_new = tl.maximum(m_i, tl.max(z, 1))     # finite: every row sees at least one key
    alpha = tl.exp2(m_i - m_new)
    p = tl.exp2(z - m_new[:, None])
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + mm(p.to(v.dtype), v, PREC)
    return acc, l_i, m_new


@triton.jit
def _fot_fwd_kernel(Q, K, V, C, O, LSE, T, scale,
                    HD: tl.constexpr, BLOCK: tl.constexpr, BLOCK_D: tl.constexpr,
                    PREC: tl.constexpr):
    start_m = tl.program_id(0) * BLOCK
    bh = tl.program_id(1).to(tl.int64)
    base, cbase = bh * T * HD, bh * T
    offs_m = start_m + tl.arange(0, BLOCK)
    offs_n = tl.arange(0, BLOCK)
    offs_d = tl.arange(0, BLOCK_D)
    row_ok = offs_m < T
    io_mask = row_ok[:, None] & (offs_d < HD)[None, :]
    q = tl.load(Q + base + offs_m[:, None] * HD + offs_d[None, :], mask=io_mask, other=0.0)
    cq = tl.load(C + cbase + offs_m, mask=row_ok, other=0.0)

    m_i = tl.full([BLOCK], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK], tl.float32)
    acc = tl.zeros([BLOCK, BLOCK_D], tl.float32)
    for start_n in range(0, start_m, BLOCK):
        acc, l_i, m_i = _fwd_step(acc, l_i, m_i, q, cq, K, V, C, base, cbase, start_n, offs_m,
                                  offs_n, offs_d, T, scale, HD, False, PREC)
    acc, l_i, m_i = _fwd_step(acc, l_i, m_i, q, cq, K, V, C, base, cbase, start_m, offs_m,
                              offs_n, offs_d, T, scale, HD, True, PREC)
    tl.store(O + base + offs_m[:, None] * HD + offs_d[None, :],
             (acc / l_i[:, None]).to(O.dtype.element_ty), mask=io_mask)
    tl.store(LSE + cbase + offs_m, m_i + tl.log2(l_i), mask=row_ok)


@triton.jit
def _dkv_step(dk, dv, dck, k, v, ck, Q, DO, C, LSE, DELTA, base, cbase, start_m, cols, offs_m,
              offs_d, T, scale, HD: tl.constexpr, DIAG: tl.constexpr, PREC: tl.constexpr):
    rows = start_m + offs_m
    row_ok = rows < T
    io_mask = row_ok[:, None] & (offs_d < HD)[None, :]
    q = tl.load(Q + base + rows[:, None] * HD + offs_d[None, :], mask=io_mask, other=0.0)
    do = tl.load(DO + base + rows[:, None] * HD + offs_d[None, :], mask=io_mask, other=0.0)
    cq = tl.load(C + cbase + rows, mask=row_ok, other=0.0)
    lse = tl.load(LSE + cbase + rows, mask=row_ok, other=float("inf"))   # padding rows: p == 0
    delta = tl.load(DELTA + cbase + rows, mask=row_ok, other=0.0)
    p = tl.exp2(_logits2(q, k, cq, ck, rows, cols, scale, DIAG, PREC) - lse[:, None])
    dp = mm(do, tl.trans(v), PREC)
    ds = p * (dp - delta[:, None])                                           # dLoss / dLogits
    dv += mm(tl.trans(p).to(do.dtype), do, PREC)
    dk += mm(tl.trans(ds).to(q.dtype), q, PREC)
    dck += tl.sum(ds, 0)
    return dk, dv, dck


@triton.jit
def _fot_bwd_dkv_kernel(Q, K, V, C, DO, LSE, DELTA, DK, DV, DCK, T, scale,
                        HD: tl.constexpr, BLOCK: tl.constexpr, BLOCK_D: tl.constexpr,
                        PREC: tl.constexpr):
    start_n = tl.program_id(0) * BLOCK
    bh = tl.program_id(1).to(tl.int64)
    base, cbase = bh * T * HD, bh * T
    offs = tl.arange(0, BLOCK)
    offs_d = tl.arange(0, BLOCK_D)
    cols = start_n + offs
    col_ok = cols < T
    kv_mask = col_ok[:, None] & (offs_d < HD)[None, :]
    k = tl.load(K + base + cols[:, None] * HD + offs_d[None, :], mask=kv_mask, other=0.0)
    v = tl.load(V + base + cols[:, None] * HD + offs_d[None, :], mask=kv_mask, other=0.0)
    ck = tl.load(C + cbase + cols, mask=col_ok, other=0.0)

    dk = tl.zeros([BLOCK, BLOCK_D], tl.float32)
    dv = tl.zeros([BLOCK, BLOCK_D], tl.float32)
    dck = tl.zeros([BLOCK], tl.float32)
    dk, dv, dck = _dkv_step(dk, dv, dck, k, v, ck, Q, DO, C, LSE, DELTA, base, cbase, start_n,
                            cols, offs, offs_d, T, scale, HD, True, PREC)
    for start_m in range(start_n + BLOCK, T, BLOCK):
        dk, dv, dck = _dkv_step(dk, dv, dck, k, v, ck, Q, DO, C, LSE, DELTA, base, cbase,
                                start_m, cols, offs, offs_d, T, scale, HD, False, PREC)
    ptrs = base + cols[:, None] * HD + offs_d[None, :]
    tl.store(DK + ptrs, (dk * scale).to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + ptrs, dv.to(DV.dtype.element_ty), mask=kv_mask)
    tl.store(DCK + cbase + cols, dck, mask=col_ok)


@triton.jit
def _dq_step(dq, dcq, q, do, cq, lse, delta, K, V, C, base, cbase, start_n, offs_m, offs_n,
             offs_d, T, scale, HD: tl.constexpr, DIAG: tl.constexpr, PREC: tl.constexpr):
    cols = start_n + offs_n
    kv_mask = (cols < T)[:, None] & (offs_d < HD)[None, :]
    k = tl.load(K + base + cols[:, None] * HD + offs_d[None, :], mask=kv_mask, other=0.0)
    v = tl.load(V + base + cols[:, None] * HD + offs_d[None, :], mask=kv_mask, other=0.0)
    ck = tl.load(C + cbase + cols, mask=cols < T, other=0.0)
    p = tl.exp2(_logits2(q, k, cq, ck, offs_m, cols, scale, DIAG, PREC) - lse[:, None])
    dp = mm(do, tl.trans(v), PREC)
    ds = p * (dp - delta[:, None])
    dq += mm(ds.to(k.dtype), k, PREC)
    dcq += tl.sum(ds, 1)
    return dq, dcq


@triton.jit
def _fot_bwd_dq_kernel(Q, K, V, C, DO, LSE, DELTA, DQ, DCQ, T, scale,
                       HD: tl.constexpr, BLOCK: tl.constexpr, BLOCK_D: tl.constexpr,
                       PREC: tl.constexpr):
    start_m = tl.program_id(0) * BLOCK
    bh = tl.program_id(1).to(tl.int64)
    base, cbase = bh * T * HD, bh * T
    offs_m = start_m + tl.arange(0, BLOCK)
    offs_n = tl.arange(0, BLOCK)
    offs_d = tl.arange(0, BLOCK_D)
    row_ok = offs_m < T
    io_mask = row_ok[:, None] & (offs_d < HD)[None, :]
    q = tl.load(Q + base + offs_m[:, None] * HD + offs_d[None, :], mask=io_mask, other=0.0)
    do = tl.load(DO + base + offs_m[:, None] * HD + offs_d[None, :], mask=io_mask, other=0.0)
    cq = tl.load(C + cbase + offs_m, mask=row_ok, other=0.0)
    lse = tl.load(LSE + cbase + offs_m, mask=row_ok, other=float("inf"))
    delta = tl.load(DELTA + cbase + offs_m, mask=row_ok, other=0.0)

    dq = tl.zeros([BLOCK, BLOCK_D], tl.float32)
    dcq = tl.zeros([BLOCK], tl.float32)
    for start_n in range(0, start_m, BLOCK):
        dq, dcq = _dq_step(dq, dcq, q, do, cq, lse, delta, K, V, C, base, cbase, start_n, offs_m,
                           offs_n, offs_d, T, scale, HD, False, PREC)
    dq, dcq = _dq_step(dq, dcq, q, do, cq, lse, delta, K, V, C, base, cbase, start_m, offs_m,
                       offs_n, offs_d, T, scale, HD, True, PREC)
    tl.store(DQ + base + offs_m[:, None] * HD + offs_d[None, :],
             (dq * scale).to(DQ.dtype.element_ty), mask=io_mask)
    tl.store(DCQ + cbase + offs_m, dcq, mask=row_ok)


# --------------------------------------------------------------------------------------------
# host side
# --------------------------------------------------------------------------------------------
class _FoTFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, log_f, scale, block_size):
        cfg = launch(q, block_size, _fot_fwd_kernel)
        q, k, v, o, lse = forward_tensors(q, k, v)
        c = log_f.float().cumsum(-1).contiguous()                  # [B, H, T] fp32
        run(_fot_fwd_kernel, cfg, q, k, v, c, o, lse, q.shape[2], scale)
        ctx.save_for_backward(q, k, v, c, o, lse)
        ctx.scale, ctx.cfg, ctx.log_f_dtype = scale, cfg, log_f.dtype
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, c, o, lse = ctx.saved_tensors
        T = q.shape[2]
        do, delta = backward_tensors(do, q, o)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        dcq = torch.empty_like(lse)
        dck = torch.empty_like(lse)
        run(_fot_bwd_dkv_kernel, ctx.cfg, q, k, v, c, do, lse, delta, dk, dv, dck, T, ctx.scale)
        run(_fot_bwd_dq_kernel, ctx.cfg, q, k, v, c, do, lse, delta, dq, dcq, T, ctx.scale)
        dc = dcq - dck                                  # c_i enters as +c_i (rows), -c_j (cols)
        dlog_f = dc.flip(-1).cumsum(-1).flip(-1)        # c_t = sum_{s<=t} log_f_s
        return dq, dk, dv, dlog_f.to(ctx.log_f_dtype), None, None


def fot_attention_triton(q, k, v, log_f, *, bias_fn=None, scale=None, block_size=None):
    """Forgetting attention with fused Triton kernels; q, k, v: [B, H, T, hd] (hd <= 128),
    log_f: [B, H, T] (log forget gates; c = cumsum(log_f) is taken in fp32).

    Returns [B, H, T, hd] in q's dtype; softmax accumulated in fp32. ``block_size`` (query and key
    tile edge, power of two >= 16) defaults to 64 on GPU (32 for fp32) and 32 on CPU.
    Differentiable in q, k, v and log_f; deterministic (no atomics).
    """
    scale = entry_checks("fot", q, k, v, log_f, "log_f", _fot_fwd_kernel, bias_fn, scale)
    return _FoTFunction.apply(q, k, v, log_f, scale, block_size)
