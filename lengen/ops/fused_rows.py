"""Causal softmax / forgetting / TRA / CoPE attention for CPU training in one C kernel per query
row (``fused_rows.c``, built by :mod:`lengen.ops.ckernels`): the fast path the tiled ops
(:mod:`lengen.ops.softmax.fast_cpu`, :mod:`lengen.ops.tra.fast_cpu`,
:mod:`lengen.ops.cope.fast_cpu`) take when it applies.

Why a second path: with small heads (the cpu-scale models have head dim 16) the tiled path is
bound by its passes over each [tq, T] tile (matmul, max, exp, sum, value product, and in
backward as many again), not by arithmetic. The kernel does a row's scores, softmax and value
product in one pass with the row in L1. Forward keeps each row's weights (row i: i + 1 floats,
up to ``KEEP_WEIGHTS_BYTES`` per call) for backward, which then needs no exponentials, logits or
relative-term pass (TRA and CoPE still make ``q . k`` again for their survivor counts and
gates); past that budget backward recomputes each row from ``q``, ``k`` and the kept row max and
sum, as flash attention does. Query rows the caller marks as not read (``rows``) are skipped.
The maths is the same as the references' (the C file's header has the equations); the tests
compare both paths with the dense references, values and gradients.

It applies (:func:`fused_applies`) to float32 causal self-attention on CPU tensors (as many
keys as queries, ``scale > 0``; ``v`` may be wider than ``q``: differential attention's
2hd-wide value over hd-wide heads) with no bias or a dense bias
that broadcasts to [B, H, T, T], an optional per-key column ``col`` [B, H, T] (forgetting
attention; the per-key part of Transformer-XL's terms), for TRA the per-query ``log_gate``, for
CoPE its position embeddings ``pe`` (the kernel makes each row's position logits
``z = scale q . e``, counts the positions, interpolates, and returns the gradients of q and e:
a [B, H, T, npos] z and its gradient in memory cost more than the row's own work),
and Transformer-XL's Toeplitz relative term (``qv``, ``P``:
:class:`lengen.ops.tile_bias.RelativeBias`, one more dot product per pair). XL's low-rank
(trig) form and float64 stay on the tiled path. ``LENGEN_FUSED_ROWS=0`` (or
``LENGEN_C_KERNELS=0``, or no C compiler) turns it off, and so does ``torch.compile`` (``train.compile``): traced through the
ctypes calls, the compiled graph's replay of the q / k / v views broke (tests/test_precision.py),
so compiled models keep SDPA and the tiled ops. Memory: it keeps two floats per query row and
the causal half of the [T, T] weights for backward (up to ``KEEP_WEIGHTS_BYTES`` per call, else
the two floats only), where the tiled path keeps the [T, T] weights.
Pairs of (batch, head) are split among the worker threads of
:func:`lengen.ops.cpu_workspace.run_groups` (ctypes releases the GIL during a call).
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import torch

from lengen.ops.ckernels import env_on, load_typed, refuse_double_backward
from lengen.ops.cpu_workspace import index_chunks, run_groups, sum_parts
from lengen.ops.heads import new_slots, qkv_buffer
from lengen.ops.tile_bias import as_4d, reduce_to

SOURCE = Path(__file__).with_name("fused_rows.c")
VERSION = 17
_P, _I, _D = ctypes.c_void_p, ctypes.c_int64, ctypes.c_double


def enabled() -> bool:
    return env_on("LENGEN_FUSED_ROWS")


def kernels():
    """The loaded library with typed entry points, or None (off, no compiler, failed build)."""
    if not enabled():
        return None
    return load_typed(SOURCE, VERSION, {
        "fused_rows_fwd": ([_I, _I, _I, _I, _I, _I, _D, _P, _P, _P, _P, _I, _I, _P, _P, _P, _P, _P,
                            _I, _P, _P, _I, _I, _I, _P, _P, _P, _P, _P, _P], _I),
        "fused_rows_bwd": ([_I, _I, _I, _I, _I, _I, _D, _P, _P, _P, _P, _I, _I, _P, _P, _P, _P, _P,
                            _I, _P, _P, _I, _I, _I, _P, _P, _P, _P, _P, _P, _P, _P, _P, _I, _I,
                            _P, _P, _P, _P, _P, _P], _I),
        "fused_rows_force_baseline": ([_I], None)})


def _bias_extent(shape) -> tuple[int, int]:
    """(batch, head) sizes of a bias of ``shape`` as a 4-d tensor before broadcasting (1 where
    shared)."""
    shape = (1,) * (4 - len(shape)) + tuple(shape)
    return shape[0], shape[1]


def fused_applies(q, k, v, scale, bias, rqv, causal=True, col=None, log_gate=None, rP=None,
                  pe=None) -> bool:
    """Whether :func:`fused_attention` takes these inputs (and the kernel is available): any
    other shape of ``bias`` (than broadcastable to [B, H, T, T]), ``col`` or ``log_gate`` (than
    [B, H, T]), a relative term other than a Toeplitz table (``rqv`` [B, H, T, D] with ``rP``
    [H, 2T - 1, D]: :class:`lengen.ops.tile_bias.RelativeBias`; the low-rank form stays tiled)
    or CoPE's position embeddings ``pe`` (than [D, npos] or [H, D, npos]) goes to the callers'
    other paths, which broadcast or raise."""
    if q.dim() != 4 or k.shape != q.shape or v.dim() != 4 or v.shape[:3] != q.shape[:3]:
        return False
    B, H, T, D = q.shape
    if bias is not None:
        if bias.dim() > 4 or tuple(bias.shape[-2:]) != (T, T):
            return False
        Bb, Hb = _bias_extent(bias.shape)
        if Bb not in (1, B) or Hb not in (1, H):
            return False
    if any(x is not None and tuple(x.shape) != (B, H, T) for x in (col, log_gate)):
        return False
    if rqv is not None and (rP is None or tuple(rqv.shape) != (B, H, T, D)
                            or tuple(rP.shape) != (H, 2 * T - 1, D)):
        return False
    if pe is not None and (pe.dim() not in (2, 3) or pe.shape[-2] != D or pe.shape[-1] < 1
                           or (pe.dim() == 3 and pe.shape[0] not in (1, H))
                           or log_gate is not None):
        return False
    f32 = all(x is None or x.dtype == torch.float32 for x in (q, k, v, rqv, rP, pe))
    return (causal and not torch.compiler.is_compiling()
            and q.device.type == k.device.type == v.device.type == "cpu"
            and f32 and scale > 0 and T > 0 and D > 0 and kernels() is not None)


def grad_buffers(bias_shape, B: int, H: int, T: int, n_chunks: int):
    """The bias gradient's accumulators, one per chunk of (batch, head) pairs, and their strides
    (floats between batch and head slices; 0 where shared): [Bb, Hb, T, T] as the bias's own
    extent (``bias_shape`` before broadcasting, so an ``expand``-ed bias gets its full gradient).
    Chunks share one tensor only when no two of them add into the same slice (neither batch nor
    heads shared); otherwise each gets its own, summed afterwards."""
    Bb, Hb = _bias_extent(bias_shape)
    dsb = Hb * T * T if Bb > 1 else 0
    dsh = T * T if Hb > 1 else 0
    shared = (Bb == 1 and B > 1) or (Hb == 1 and H > 1)
    first = torch.zeros(Bb, Hb, T, T)
    bufs = [first] + [torch.zeros_like(first) if shared else first for _ in range(n_chunks - 1)]
    return bufs, dsb, dsh


def _ptr(x):
    return None if x is None else x.data_ptr()


def rows_view(x: torch.Tensor) -> torch.Tensor:
    """x [B, H, T, D] as the kernel reads it: any strides whose rows are D contiguous floats
    (the heads of the model's projections are read where they are), else a contiguous copy."""
    x = x.to(torch.float32)
    return x if x.stride(-1) == 1 or x.shape[-1] == 1 else x.contiguous()


def head_rows(B: int, H: int, T: int, D: int) -> torch.Tensor:
    """An empty [B, H, T, D] in the [B, T, H, D] layout: ``y.transpose(1, 2).reshape(B, T,
    H * D)``, how attention's output goes to its projection, is then a view, not a copy."""
    return torch.empty(B, T, H, D, dtype=torch.float32).transpose(1, 2)


def grads_like(q, k, v):
    """dq, dk, dv for the kernel to write: the same three slots of one new [B, T, 3, H, D]
    buffer when q, k, v are slots of one (:func:`lengen.ops.heads.qkv_buffer`), so that the
    projection's gradient is that buffer with no copy; else one contiguous tensor each."""
    if qkv_buffer(q, k, v) is not None:
        return new_slots(*q.shape)
    return tuple(torch.empty(x.shape, dtype=torch.float32) for x in (q, k, v))


def layout(*xs) -> torch.Tensor:
    """The kernel's ``lay``: (batch, head, row) strides in floats of each [B, H, T, D] tensor."""
    return torch.tensor([list(x.stride()[:3]) for x in xs], dtype=torch.int64)



def _check(status: int, what: str) -> None:
    if status:                                   # never a silently missing result
        raise MemoryError(f"fused_rows {what}: could not allocate its per-call scratch")


def _table_t(P: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The relative term's table [H, 2T - 1, D] transposed per head to [H, D, Up] with zero
    columns from 2T - 1 on (Up >= T + 8: a row's last vector of distances stays inside)."""
    H, U, D = P.shape
    Up = -(-(U + 8) // 8) * 8
    Pt = P.new_zeros(H, D, Up)
    Pt[:, :, :U] = P.transpose(1, 2)
    return Pt, Up


#: the most bytes one call (one layer) keeps of its attention weights for backward:
#: B H T (T + 1) / 2 floats, 4.2 MB at the flip-flop models' 32 x 4 heads x 127; past this
#: backward remakes the weights from q and k. Every layer keeps its own until backward.
KEEP_WEIGHTS_BYTES = 64 << 20


def kept_weights(B: int, H: int, T: int, needs_grad: bool) -> torch.Tensor | None:
    """The buffer forward fills with every row's attention weights (row i of a (batch, head)
    pair: i + 1 floats), or None: no gradient to come, or over the budget."""
    n = B * H * (T * (T + 1) // 2)
    if not needs_grad or 4 * n > KEEP_WEIGHTS_BYTES:
        return None
    return torch.empty(n, dtype=torch.float32)


class _FusedRows(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, col, log_gate, qv, P, pe, scale, rows):
        B, H, T, D = q.shape
        Dv = v.shape[-1]
        q, k, v = rows_view(q), rows_view(k), rows_view(v)
        lib = kernels()
        b4 = None
        if bias is not None:
            b4 = as_4d(bias.to(torch.float32), H, T)                 # [Bb, H, T, T] view
            if b4.stride(-1) != 1 or b4.stride(-2) != T:
                b4 = b4.contiguous()
        sb = 0 if b4 is None or b4.shape[0] == 1 else b4.stride(0)
        sh = 0 if b4 is None else b4.stride(1)
        colc = None if col is None else col.to(torch.float32).contiguous()        # [B, H, T]
        gc = None if log_gate is None else log_gate.to(torch.float32).contiguous()  # [B, H, T]
        Pt, Up = (None, 0) if qv is None else _table_t(P)
        qv = None if qv is None else qv.contiguous()                             # [B, H, T, D]
        P = None if P is None else P.contiguous()                                # [H, 2T-1, D]
        pe3 = pe_pad = peT = None
        npos = Np = 0
        if pe is not None:                  # CoPE: the kernel makes z = scale q . e per row
            pe3 = pe.reshape(-1, D, pe.shape[-1])                        # [1 or H, D, npos]
            npos, Np = pe3.shape[-1], -(-pe3.shape[-1] // 8) * 8
            pe_pad = pe3.new_zeros(pe3.shape[0], D, Np)                   # rows of whole vectors
            pe_pad[..., :npos] = pe3
            peT = pe3.transpose(1, 2).contiguous()                         # [1 or H, npos, D]
        out = head_rows(B, H, T, Dv)                                   # [B, H, T, Dv]
        lay = layout(q, k, v, out)
        m = torch.empty(B, H, T, dtype=torch.float32)        # row max of the base-2 logits
        lsum = torch.empty(B, H, T, dtype=torch.float32)     # row sum of the weights (0: no key)
        chunks = index_chunks(B * H)
        pw = kept_weights(B, H, T, any(ctx.needs_input_grad))
        need = None if rows is None else rows.to(torch.uint8).contiguous()       # [B, T]

        def run(ci):
            p0, p1 = chunks[ci]
            _check(lib.fused_rows_fwd(p0, p1, T, D, Dv, H, scale, q.data_ptr(), k.data_ptr(),
                                      v.data_ptr(), _ptr(b4), sb, sh, _ptr(colc), _ptr(gc),
                                      _ptr(qv), _ptr(P), _ptr(Pt), Up, _ptr(pe_pad), _ptr(peT),
                                      npos, Np, 0 if pe3 is None else pe3.shape[0],
                                      lay.data_ptr(), out.data_ptr(), m.data_ptr(),
                                      lsum.data_ptr(), _ptr(pw), _ptr(need)), "forward")

        run_groups(run, len(chunks))
        ctx.save_for_backward(q, k, v, b4, colc, gc, qv, P, Pt, pe_pad, peT, out, m, lsum, pw)
        ctx.pe_shape = None if pe is None else (pe.shape, pe.dtype)
        ctx.meta = (scale, sb, sh, Up, None if bias is None else bias.shape,
                    None if bias is None else bias.dtype,
                    None if col is None else col.dtype,
                    None if log_gate is None else log_gate.dtype)
        return out

    @staticmethod
    def backward(ctx, dout):
        refuse_double_backward("fused_rows attention",
                               "use attention impl='naive' for that, or LENGEN_FUSED_ROWS=0")
        q, k, v, b4, colc, gc, qv, P, Pt, pe_pad, peT, out, m, lsum, pw = ctx.saved_tensors
        scale, sb, sh, Up, bshape, bdtype, cdtype, gdtype = ctx.meta
        needs = ctx.needs_input_grad
        B, H, T, D = q.shape
        lib = kernels()
        dout = rows_view(dout)
        dq, dk, dv = grads_like(q, k, v)
        lay = layout(q, k, v, out, dout, dq, dk, dv)
        chunks = index_chunks(B * H)
        dcol = torch.zeros(B, H, T) if colc is not None and needs[4] else None
        dg = torch.empty(B, H, T) if gc is not None else None
        dbias, dsb, dsh = [None] * len(chunks), 0, 0
        if b4 is not None and needs[3]:
            dbias, dsb, dsh = grad_buffers(bshape, B, H, T, len(chunks))
        # the relative term's gradients: qv's rows are written once each; the table is shared by
        # the batch, so every chunk adds into its own and they are summed
        dqv = None if qv is None else torch.zeros_like(qv)
        dPs = [None] * len(chunks) if qv is None else [torch.zeros_like(P) for _ in chunks]
        # CoPE's embedding gradient: shared by the batch, so one accumulator per chunk (as peT)
        dpeTs = [None] * len(chunks) if peT is None else [torch.zeros_like(peT) for _ in chunks]
        npos, Np = (0, 0) if peT is None else (peT.shape[1], pe_pad.shape[-1])

        def run(ci):
            p0, p1 = chunks[ci]
            _check(lib.fused_rows_bwd(p0, p1, T, D, v.shape[-1], H, scale, q.data_ptr(), k.data_ptr(),
                                      v.data_ptr(), _ptr(b4), sb, sh, _ptr(colc), _ptr(gc),
                                      _ptr(qv), _ptr(P), _ptr(Pt), Up, _ptr(pe_pad), _ptr(peT),
                                      npos, Np, 0 if peT is None else peT.shape[0],
                                      lay.data_ptr(), out.data_ptr(), dout.data_ptr(),
                                      m.data_ptr(), lsum.data_ptr(), dq.data_ptr(),
                                      dk.data_ptr(), dv.data_ptr(),
                                      _ptr(dbias[ci]), dsb, dsh, _ptr(dcol), _ptr(dg), _ptr(dqv),
                                      _ptr(dPs[ci]), _ptr(dpeTs[ci]), _ptr(pw)),
                   "backward")

        run_groups(run, len(chunks))
        db = None
        if dbias[0] is not None:
            db = reduce_to(sum_parts(dbias), bshape).to(bdtype)
        dP = sum_parts(dPs)
        dpe = None
        if ctx.pe_shape is not None:
            shape, dtype = ctx.pe_shape
            dpe = sum_parts(dpeTs).transpose(1, 2).reshape(shape).to(dtype)
        return (dq, dk, dv, db, None if dcol is None else dcol.to(cdtype),
                None if dg is None else dg.to(gdtype), dqv, dP, dpe, None, None)


def fused_attention(q, k, v, *, scale: float, bias=None, col=None, log_gate=None, qv=None, P=None,
                    pe=None, rows=None):
    """Causal attention of q, k [B, H, T, D] and v [B, H, T, Dv] (float32; check
    :func:`fused_applies` first; out [B, H, T, Dv]):
    softmax over ``scale q.k + col_j + bias (+ qv_i . P[(T - 1) - i + j])``
    (``col`` [B, H, T], ``bias`` broadcastable to [B, H, T, T], ``qv`` [B, H, T, D] and ``P``
    [H, 2T - 1, D]: a Toeplitz relative term), TRA's thresholded logits when ``log_gate``
    [B, H, T] is given, or CoPE's when its position embeddings ``pe`` [D, npos] or [H, D, npos]
    are (the counted positions' logits ``z = scale q . e``, made per row in the kernel;
    :mod:`lengen.ops.cope.naive`). ``rows`` (bool [B, T]): the query rows whose outputs the
    caller reads (``RowPlan.rows``, :mod:`lengen.ops.rows`); the others are not computed, come out
    0 and pass no gradient back."""
    if rows is not None and (rows.dtype != torch.bool or rows.device.type != "cpu"
                             or tuple(rows.shape) != (q.shape[0], q.shape[2])):
        raise ValueError(f"rows must be a bool [B, T] = [{q.shape[0]}, {q.shape[2]}] on the "
                         f"CPU, got {rows.dtype} {list(rows.shape)} on {rows.device}")
    return _FusedRows.apply(q, k, v, bias, col, log_gate, qv, P, pe, float(scale), rows)
