"""The per-row C kernel (``lengen/ops/fused_rows.c``) against the dense references.

Kinds: softmax, forgetting (FoT), TRA and CoPE (its position logits, counted positions and gate
gradients), each also with the Toeplitz relative term (Transformer-XL's tiled form).

``test_fast_cpu.py`` already runs the float32 default-tile cases through it (the ops take it
whenever it applies); here: every bias layout it reads, head dims on each of its code paths
(the compile-time 8 / 16 / 32 / 64, a multiple of 8 it does not specialise, and widths that are
no multiple of 8), lengths around its 8-key vector steps, worker threads adding into a shared
bias gradient, wide logits (the polynomial exp2 and its floor), the module paths that select it,
and the switches that turn it off.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lengen.attention.softmax import SoftmaxAttention
from lengen.ops.cope.fast_cpu import cope_attention_fast_cpu
from lengen.ops.cope.naive import cope_attention_naive
from lengen.ops import fused_rows
from lengen.ops.fot import fot_attention_naive
from lengen.ops.fused_rows import fused_applies, fused_attention, grad_buffers
from lengen.ops.softmax import softmax_attention_naive
from lengen.ops.softmax.fast_cpu import softmax_attention_fast_cpu
from lengen.ops.tile_bias import RelativeBias
from lengen.ops.tra import tra_attention_naive
from lengen.ops.tra.fast_cpu import tra_attention_fast_cpu

pytestmark = pytest.mark.skipif(fused_rows.kernels() is None,
                                reason="no C compiler: the ops use their tiled path")


#: CoPE's table of position embeddings in these tests: small enough that rows of 130 keys reach
#: the clamp at npos - 1, large enough that short rows interpolate inside it
NPOS = 12


def inputs(B, H, T, D, seed=0, spread=1.0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)               # noqa: E731
    return dict(q=spread * r(B, H, T, D), k=r(B, H, T, D), v=r(B, H, T, D),
                gate=F.logsigmoid(r(B, H, T)), go=r(B, H, T, D), pe=r(D, NPOS))


def relative(x, seed=0):
    """Adds a Toeplitz relative term (qv, its table P [H, 2T - 1, D] and a per-key content
    column) to the inputs x, sized from x's q."""
    B, H, T, D = x["q"].shape
    g = torch.Generator().manual_seed(seed)
    x.update(qv=0.5 * torch.randn(B, H, T, D, generator=g),
             P=0.5 * torch.randn(H, 2 * T - 1, D, generator=g),
             content=torch.randn(B, H, T, generator=g))
    return x


def grads(fn, x, names):
    """fn(**leaves) -> out; returns out and the gradients of ``names`` for sum(out * go)."""
    leaves = {n: x[n].clone().requires_grad_(True) for n in names}
    out = fn(**leaves)
    (out * x["go"]).sum().backward()
    return [out.detach()] + [torch.zeros_like(leaves[n]) if leaves[n].grad is None
                             else leaves[n].grad for n in names]


def close(got, ref, what, tol=2e-5):
    for i, (a, b) in enumerate(zip(got, ref)):
        assert torch.isfinite(a).all(), f"{what}: item {i} not finite"
        err = (a - b).abs().max().item()
        scale = max(b.abs().max().item(), 1.0)
        assert err <= tol * scale, f"{what}: item {i} off by {err:.2e} (scale {scale:.2e})"


KINDS = ["softmax", "fot", "tra", "cope"]
#: the inputs every kind takes (``pe`` is CoPE's; the others give it a zero gradient)
NAMES = ["q", "k", "v", "gate", "pe"]
REL = ["qv", "P", "content"]


def pair(kind):
    """(fused op, reference op) taking q, k, v, gate, pe and optionally a dense bias and a
    relative term (qv, P, content; the reference adds its dense form to the bias)."""
    def bias_fn(bias, qv, P, content):
        if qv is not None:
            rel = RelativeBias(qv, P, content).dense()
            bias = rel if bias is None else bias + rel
        return None if bias is None else (lambda s, e: bias[..., s:e, :])

    def fused(q, k, v, gate, pe, bias=None, qv=None, P=None, content=None, rows=None):
        sc = q.shape[-1] ** -0.5
        kw = dict(scale=sc, bias=bias, qv=qv, P=P, col=content, rows=rows)
        if kind == "fot":
            kw["col"] = -gate.cumsum(-1) + (0 if content is None else content)
        if kind == "tra":
            kw["log_gate"] = gate
        if kind == "cope":
            kw["pe"] = pe
        return fused_attention(q, k, v, **kw)

    def ref(q, k, v, gate, pe, bias=None, qv=None, P=None, content=None):
        b = bias_fn(bias, qv, P, content)
        if kind == "softmax":
            return softmax_attention_naive(q, k, v, causal=True, bias_fn=b)
        if kind == "fot":
            return fot_attention_naive(q, k, v, gate, bias_fn=b)
        if kind == "cope":
            return cope_attention_naive(q, k, v, pe, bias_fn=b)
        return tra_attention_naive(q, k, v, gate, bias_fn=b)
    return fused, ref


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("D", [8, 16, 32, 64, 24, 72, 128, 12, 5])
@pytest.mark.parametrize("T", [1, 7, 8, 9, 130])
def test_matches_reference(kind, D, T):
    x = inputs(2, 3, T, D, seed=D * 1000 + T)
    fused, ref = pair(kind)
    names = NAMES
    close(grads(fused, x, names), grads(ref, x, names), f"{kind} D={D} T={T}")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", ["T T", "H T T", "1 H T T", "B H T T", "B 1 T T", "1 1 T T"])
def test_bias_layouts(kind, shape):
    B, H, T, D = 2, 3, 37, 16
    x = inputs(B, H, T, D, seed=7)
    dims = [dict(B=B, H=H, T=T)[s] if s in "BHT" else int(s) for s in shape.split()]
    x["bias"] = 0.5 * torch.randn(*dims, generator=torch.Generator().manual_seed(3))
    fused, ref = pair(kind)
    names = NAMES + ["bias"]
    got, want = grads(fused, x, names), grads(ref, x, names)
    assert got[-1].shape == x["bias"].shape
    close(got, want, f"{kind} bias {shape}")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", ["H T T", "B 1 T T", "B H T T"])
def test_two_worker_threads(kind, shape):
    """Pairs are split between two workers; a bias shared by the batch (or the heads) gets one
    gradient accumulator per worker, summed after."""
    B, H, T, D = 3, 2, 50, 16
    x = inputs(B, H, T, D, seed=11)
    dims = [dict(B=B, H=H, T=T)[s] if s in "BHT" else int(s) for s in shape.split()]
    x["bias"] = 0.5 * torch.randn(*dims, generator=torch.Generator().manual_seed(4))
    fused, ref = pair(kind)
    names = NAMES + ["bias"]
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        got = grads(fused, x, names)
    finally:
        torch.set_num_threads(before)
    close(got, grads(ref, x, names), f"{kind} two threads bias {shape}")


@pytest.mark.parametrize("kind", KINDS)
def test_wide_logits_as_accurate_as_reference(kind):
    """Scores spread over +-100: most weights of a row hit the exp2 floor or underflow. Against
    the float64 reference the kernel is no worse than the float32 reference (or 2e-6)."""
    x = inputs(2, 2, 97, 16, seed=5, spread=25.0)
    fused, ref = pair(kind)
    names = NAMES
    x64 = {n: t.double() for n, t in x.items()}
    leaves = {n: x64[n].clone().requires_grad_(True) for n in names}
    out = ref(**leaves)
    (out * x64["go"]).sum().backward()
    exact = [out.detach()] + [torch.zeros_like(leaves[n]) if leaves[n].grad is None
                              else leaves[n].grad for n in names]

    def errors(fn):
        return [((a.double() - b).abs().max() / max(b.abs().max(), 1.0)).item()
                for a, b in zip(grads(fn, x, names), exact)]
    for i, (e_f, e_r) in enumerate(zip(errors(fused), errors(ref))):
        assert e_f <= max(3 * e_r, 2e-6), f"{kind} item {i}: {e_f:.1e} vs reference {e_r:.1e}"


def test_future_keys_never_read():
    x = inputs(1, 2, 40, 16, seed=2)
    k2, v2 = x["k"].clone(), x["v"].clone()
    k2[:, :, 25:], v2[:, :, 25:] = float("nan"), float("inf")
    for kind in KINDS:
        fused, _ = pair(kind)
        a = fused(x["q"], x["k"], x["v"], x["gate"], x["pe"])
        b = fused(x["q"], k2, v2, x["gate"], x["pe"])
        assert torch.equal(a[:, :, :25], b[:, :, :25]), kind


def test_when_it_applies(monkeypatch):
    q = torch.randn(1, 2, 5, 8)
    assert fused_applies(q, q, q, 0.3, None, None)
    assert fused_applies(q, q, q, 0.3, torch.zeros(2, 5, 5), None)
    assert not fused_applies(q, q, q, 0.3, None, None, causal=False)
    assert not fused_applies(q.double(), q.double(), q.double(), 0.3, None, None)
    assert not fused_applies(q, q[:, :, :3], q[:, :, :3], 0.3, None, None)     # cross-attention
    assert fused_applies(q, q, q[..., :4], 0.3, None, None)                     # v narrower
    assert fused_applies(q, q, torch.cat([q, q], -1), 0.3, None, None)          # v wider (diff)
    assert not fused_applies(q, q, q[:, :1], 0.3, None, None)                   # v's heads
    assert not fused_applies(q, q, q, 0.3, None, torch.zeros(1, 2, 5, 8))       # no table
    assert fused_applies(q, q, q, 0.3, None, q, rP=torch.zeros(2, 9, 8))        # Toeplitz table
    assert not fused_applies(q, q, q, 0.3, None, q, rP=torch.zeros(5, 8))       # low-rank form
    assert not fused_applies(q, q, q, 0.3, None, q, rP=torch.zeros(2, 5, 8))    # table too short
    assert fused_applies(q, q, q, 0.3, None, None, pe=torch.zeros(8, 3))        # CoPE
    assert fused_applies(q, q, q, 0.3, None, None, pe=torch.zeros(2, 8, 3))     # per head
    assert not fused_applies(q, q, q, 0.3, None, None, pe=torch.zeros(8, 0))
    assert not fused_applies(q, q, q, 0.3, None, None, pe=torch.zeros(4, 3))    # not head dim
    assert not fused_applies(q, q, q, 0.3, None, None, pe=torch.zeros(3, 8, 3))  # not H heads
    assert not fused_applies(q, q, q, 0.3, None, None, pe=torch.zeros(8, 3),
                             log_gate=torch.zeros(1, 2, 5))                      # CoPE and TRA
    assert not fused_applies(q, q, q, 0.3, torch.zeros(2, 5, 4), None)          # bias not T x T
    monkeypatch.setenv("LENGEN_FUSED_ROWS", "0")
    assert not fused_applies(q, q, q, 0.3, None, None)


def test_ops_take_it_unless_told(monkeypatch):
    """The tiled op's own calls: default tiles take the kernel, an explicit tile size or
    LENGEN_FUSED_ROWS=0 the tiled path; all three agree."""
    x = inputs(2, 2, 45, 16, seed=9)
    calls = []
    real = fused_rows._FusedRows.apply
    monkeypatch.setattr(fused_rows._FusedRows, "apply",
                        staticmethod(lambda *a: calls.append(1) or real(*a)))
    q, k, v = x["q"], x["k"], x["v"]
    a = softmax_attention_fast_cpu(q, k, v)
    assert calls == [1]
    b = softmax_attention_fast_cpu(q, k, v, budget=600, qblock=16)
    monkeypatch.setenv("LENGEN_FUSED_ROWS", "0")
    c = softmax_attention_fast_cpu(q, k, v)
    assert calls == [1]
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(a, c, rtol=1e-5, atol=1e-6)


def test_softmax_module_trains_with_it_and_evaluates_with_sdpa(monkeypatch):
    """No bias: training on CPU takes the kernel, evaluation SDPA (as before), same values."""
    att = SoftmaxAttention(d_model=32, n_heads=2, causal=True)
    x = inputs(2, 2, 21, 16, seed=1)
    calls = []
    real = fused_rows._FusedRows.apply
    monkeypatch.setattr(fused_rows._FusedRows, "apply",
                        staticmethod(lambda *a: calls.append(1) or real(*a)))
    att.train()
    out = att.attend(x["q"], x["k"], x["v"], None, None)
    assert calls == [1]
    att.eval()
    ref = att.attend(x["q"], x["k"], x["v"], None, None)
    assert calls == [1]
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    att.train()
    att.impl = "naive"
    torch.testing.assert_close(att.attend(x["q"], x["k"], x["v"], None, None), ref, rtol=1e-5,
                               atol=1e-6)
    assert calls == [1]


@pytest.fixture
def baseline_build():
    """The kernel's baseline (non-AVX2) build, which CPUs without AVX2 + FMA run."""
    lib = fused_rows.kernels()
    lib.fused_rows_force_baseline(1)
    yield
    lib.fused_rows_force_baseline(0)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("D,Dv,T", [(16, 16, 45), (12, 12, 9), (64, 64, 20), (16, 32, 21)])
def test_baseline_build_matches_reference(kind, D, Dv, T, baseline_build):
    x = inputs(2, 2, T, D, seed=D + T)
    if Dv != D:                                      # differential attention's wider value
        g = torch.Generator().manual_seed(Dv)
        x.update(v=torch.randn(2, 2, T, Dv, generator=g), go=torch.randn(2, 2, T, Dv, generator=g))
    x["bias"] = 0.5 * torch.randn(2, T, T, generator=torch.Generator().manual_seed(6))
    fused, ref = pair(kind)
    names = NAMES + ["bias"]
    close(grads(fused, x, names), grads(ref, x, names), f"baseline {kind} D={D} Dv={Dv} T={T}")


@pytest.mark.parametrize("kind", KINDS)
def test_expanded_bias_gets_its_full_gradient(kind):
    """A [B, H, T, T] bias that is an ``expand`` of [1, H, T, T] (as FIRE returns for [B, T]
    positions with equal rows) reads one slice for every batch index, but its gradient is the
    full [B, H, T, T] of the expanded tensor."""
    B, H, T, D = 3, 2, 19, 16
    x = inputs(B, H, T, D, seed=8)
    base = 0.5 * torch.randn(1, H, T, T, generator=torch.Generator().manual_seed(2))
    fused, ref = pair(kind)
    got, want = [], []
    for fn, acc in ((fused, got), (ref, want)):
        b = base.clone().requires_grad_(True)
        expanded = b.expand(B, H, T, T)
        expanded.retain_grad()
        leaves = {n: x[n].clone().requires_grad_(True) for n in NAMES}
        out = fn(**leaves, bias=expanded)
        (out * x["go"]).sum().backward()
        acc += [out.detach(), expanded.grad, b.grad]
    assert got[1].shape == (B, H, T, T)
    close(got, want, f"{kind} expanded bias")


def test_grad_buffers_per_chunk_where_slices_are_shared():
    """Chunks of (batch, head) pairs add into one accumulator only when no slice of the bias is
    shared between them; a bias shared by the batch or by the heads gets one per chunk."""
    B, H, T = 3, 2, 5
    for shape, shared, strides in [((H, T, T), True, (0, T * T)),
                                   ((T, T), True, (0, 0)),
                                   ((B, 1, T, T), True, (T * T, 0)),
                                   ((B, H, T, T), False, (H * T * T, T * T))]:
        bufs, dsb, dsh = grad_buffers(shape, B, H, T, 3)
        assert (dsb, dsh) == strides, shape
        distinct = len({id(b) for b in bufs})
        assert distinct == (3 if shared else 1), shape
        assert all(b.abs().sum() == 0 for b in bufs)


def test_double_backward_raises():
    x = inputs(1, 2, 9, 16, seed=3)
    q = x["q"].clone().requires_grad_(True)
    out = fused_attention(q, x["k"], x["v"], scale=0.25)
    with pytest.raises(RuntimeError, match="no double backward"):
        torch.autograd.grad((out ** 2).sum(), q, create_graph=True)


def test_other_shapes_go_to_the_other_paths():
    """A gate, column or bias the kernel cannot index is not handed to it (the callers' other
    paths broadcast it or raise)."""
    B, H, T, D = 2, 3, 11, 8
    q = torch.randn(B, H, T, D)
    assert not fused_applies(q, q, q, 0.3, None, None, log_gate=torch.zeros(B, 1, T))
    assert not fused_applies(q, q, q, 0.3, None, None, col=torch.zeros(B, 1, T))
    assert not fused_applies(q, q, q, 0.3, torch.zeros(2 * B, H, T, T), None)
    assert not fused_applies(q, q, q, 0.3, torch.zeros(B, 2, T, T), None)
    assert fused_applies(q, q, q, 0.3, torch.zeros(B, 1, T, T), None,
                         log_gate=torch.zeros(B, H, T), col=torch.zeros(B, H, T))
    gate = F.logsigmoid(torch.randn(B, 1, T))
    torch.testing.assert_close(tra_attention_fast_cpu(q, q, q, gate.expand(B, H, T)),
                               tra_attention_naive(q, q, q, gate), rtol=1e-5, atol=1e-6)


def test_tra_row_whose_survivors_are_all_masked_outputs_zero():
    """Keys that survive the threshold but carry a -inf bias leave the row without a key: zero
    output and gradient, as the reference, not 0 / 0."""
    g = torch.Generator().manual_seed(0)
    B, H, T, D = 1, 1, 6, 4
    q, k, v = (torch.randn(B, H, T, D, generator=g) for _ in range(3))
    q[0, 0, 0] = k[0, 0, 0]                                  # row 0's only key survives ...
    bias = torch.zeros(T, T)
    bias[:, 0] = float("-inf")                               # ... and is masked by the bias
    gate = F.logsigmoid(torch.randn(B, H, T, generator=g))
    out = fused_attention(q, k, v, scale=D ** -0.5, bias=bias, log_gate=gate)
    ref = tra_attention_naive(q, k, v, gate, bias_fn=lambda s, e: bias[s:e])
    assert torch.isfinite(out).all()
    assert (out[0, 0, 0] == 0).all()
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("D,T", [(16, 1), (16, 9), (16, 70), (8, 33), (32, 17), (5, 12)])
def test_relative_term_matches_dense(kind, D, T):
    """Transformer-XL's Toeplitz term qv_i . P[(T-1)-i+j] plus its content column, with and
    without a dense bias beside it: values and the gradients of qv, the table and the column."""
    x = relative(inputs(2, 3, T, D, seed=D * 100 + T), seed=T)
    fused, ref = pair(kind)
    names = NAMES + REL
    close(grads(fused, x, names), grads(ref, x, names), f"{kind} relative D={D} T={T}")
    x["bias"] = 0.5 * torch.randn(3, T, T, generator=torch.Generator().manual_seed(1))
    names = names + ["bias"]
    close(grads(fused, x, names), grads(ref, x, names), f"{kind} relative + bias D={D} T={T}")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("D,Dv,T", [(16, 32, 9), (16, 32, 70), (8, 16, 33), (16, 8, 20),
                                    (5, 12, 12), (32, 64, 17)])
def test_value_of_another_width(kind, D, Dv, T):
    """A value wider (differential attention's 2hd at head dim hd: the compile-time 16 / 32 copy,
    and others at run-time widths) or narrower than q and k, with the relative term and a dense
    bias: values and every gradient against the reference."""
    x = relative(inputs(2, 3, T, D, seed=D * 10 + Dv + T), seed=T)
    g = torch.Generator().manual_seed(Dv)
    x.update(v=torch.randn(2, 3, T, Dv, generator=g), go=torch.randn(2, 3, T, Dv, generator=g),
             bias=0.5 * torch.randn(3, T, T, generator=g))
    fused, ref = pair(kind)
    names = NAMES + REL + ["bias"]
    close(grads(fused, x, names), grads(ref, x, names), f"{kind} D={D} Dv={Dv} T={T}")


@pytest.mark.parametrize("kind", KINDS)
def test_relative_table_gradient_with_two_worker_threads(kind):
    """The table is shared by the batch: each worker's chunk adds into its own gradient."""
    x = relative(inputs(3, 2, 41, 16, seed=12), seed=2)
    fused, ref = pair(kind)
    names = NAMES + REL
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        got = grads(fused, x, names)
    finally:
        torch.set_num_threads(before)
    close(got, grads(ref, x, names), f"{kind} relative, two threads")


@pytest.mark.parametrize("npos", [1, 2, 64])
def test_cope_positions_interpolate_and_clamp(npos):
    """npos = 1: every position clamps to 0 (no interpolation, no gate gradient through w);
    npos = 2 and gates near 1: nearly every row clamps; 64: none does at T = 40."""
    x = inputs(2, 2, 40, 16, seed=npos)
    x["pe"] = torch.randn(16, npos, generator=torch.Generator().manual_seed(npos))
    x["k"] = x["k"] + 2 * x["q"].mean(-2, keepdim=True)        # many gates near 1
    fused, ref = pair("cope")
    close(grads(fused, x, NAMES), grads(ref, x, NAMES), f"cope npos={npos}")


def test_cope_op_takes_it_unless_told(monkeypatch):
    """CoPE's tiled op hands default tiles to the kernel (z' made outside, its gradient through
    autograd), an explicit tile size keeps its own path; both agree with the reference."""
    x = inputs(2, 2, 45, 16, seed=4)
    calls = []
    real = fused_rows._FusedRows.apply
    monkeypatch.setattr(fused_rows._FusedRows, "apply",
                        staticmethod(lambda *a: calls.append(1) or real(*a)))
    names = ["q", "k", "v", "pe"]
    got = grads(lambda q, k, v, pe: cope_attention_fast_cpu(q, k, v, pe), x, names)
    assert calls == [1]
    tiled = grads(lambda q, k, v, pe: cope_attention_fast_cpu(q, k, v, pe, budget=600,
                                                              qblock=16), x, names)
    assert calls == [1]
    want = grads(lambda q, k, v, pe: cope_attention_naive(q, k, v, pe), x, names)
    close(got, want, "cope op, kernel")
    close(tiled, want, "cope op, tiled")


def test_cope_count_rounding_onto_the_clamp_matches_the_reference():
    """Within a vector of 8 keys the counts are suffix sums in another order than one by one, so
    a lane right of the leftmost clamped one can round onto npos - 1 (a gate under fp32
    rounding). Found by a review's fuzzing under AddressSanitizer when dz was a [B, H, T, npos]
    tensor: the backward added into z[npos], past the row. dz is now a row buffer in the kernel
    with room past npos, and the guard keeps the write inside the row's entries; these scores
    (one set per build) must still give the reference's values and gradients."""
    cases = {1: [2.6063220500946045, -30.0, -2.2436938285827637, 1.5044525861740112,
                 -1.6703274250030518, -1.1123154163360596, 1.0752723217010498, 2.657130241394043],
             0: [-30.0, 0.38009166717529297, 2.258455276489258, -1.6721702814102173,
                 2.857088088989258, -1.3352398872375488, -3.4570393562316895, -1.672773003578186]}
    T, npos = 8, 4
    lib = fused_rows.kernels()
    for baseline, scores in cases.items():             # each set of scores hits one build
        x = {"q": torch.ones(1, 1, T, 1), "k": torch.tensor(scores).view(1, 1, T, 1),
             "v": torch.linspace(-1, 1, T).view(1, 1, T, 1),
             "pe": torch.randn(1, npos, generator=torch.Generator().manual_seed(1))}
        for sign in (1.0, -1.0):
            x["go"] = torch.full((1, 1, T, 1), sign)
            lib.fused_rows_force_baseline(baseline)
            try:
                got = grads(lambda q, k, v, pe: fused_attention(q, k, v, scale=1.0, pe=pe), x,
                            ["q", "k", "v", "pe"])
            finally:
                lib.fused_rows_force_baseline(0)
            want = grads(lambda q, k, v, pe: cope_attention_naive(q, k, v, pe, scale=1.0), x,
                         ["q", "k", "v", "pe"])
            # these counts sit on the clamp, a kink of the interpolation: where the kernel's
            # order of additions rounds onto npos - 1 (no position gradient) the reference's
            # rounds just under it (the slope of the last bucket), so the score gradients differ
            # by about 1e-4 of their scale here (values and dv agree to fp32 rounding)
            close(got, want, f"baseline={baseline} sign={sign}", tol=1e-3)
            close(got[:1] + got[3:4], want[:1] + want[3:4], f"values, dv {baseline} {sign}")


@pytest.mark.parametrize("heads", [1, 3])
def test_cope_embeddings_per_head(heads):
    """CoPE's embeddings [H, D, npos] (one table per head) or [1, D, npos]: the kernel reads
    head h's table for pair (b, h) and sums each table's gradient over the batch."""
    B, H, T, D, npos = 2, 3, 29, 8, 12
    x = inputs(B, H, T, D, seed=heads)
    x["pe"] = torch.randn(heads, D, npos, generator=torch.Generator().manual_seed(5))
    names = ["q", "k", "v", "pe"]
    sc = D ** -0.5
    got = grads(lambda q, k, v, pe: fused_attention(q, k, v, scale=sc, pe=pe), x, names)
    want = grads(lambda q, k, v, pe: cope_attention_naive(q, k, v, pe), x, names)
    close(got, want, f"cope pe heads={heads}")


def test_cope_nan_row_stays_in_its_row():
    """A NaN query makes its row's counts NaN, which the kernel takes as clamped: that row's dz
    lands on npos - 1 even where the row cannot reach it. It must be consumed with the row, not
    left in the kernel's row buffer for a later row (found by a review's fuzzing: dq row 12
    turned NaN here). Row 0 attends only to key 0, and no other row's dq reads q_0, so only
    dq row 0 may be non-finite."""
    g = torch.Generator().manual_seed(0)
    B, H, T, D, npos = 1, 1, 16, 8, 16
    q, k, v, go = (torch.randn(B, H, T, D, generator=g) for _ in range(4))
    pe = torch.randn(D, npos, generator=g)
    q[0, 0, 0, 0] = float("nan")
    lib = fused_rows.kernels()
    for baseline in (0, 1):
        lib.fused_rows_force_baseline(baseline)
        try:
            qq = q.clone().requires_grad_(True)
            (fused_attention(qq, k, v, scale=D ** -0.5, pe=pe) * go).sum().backward()
        finally:
            lib.fused_rows_force_baseline(0)
        bad = [i for i in range(T) if not torch.isfinite(qq.grad[0, 0, i]).all()]
        assert bad == [0], f"baseline={baseline}: non-finite dq rows {bad}"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("D,T", [(16, 9), (16, 70), (5, 12)])
def test_rows_without_upstream_gradient(kind, D, T):
    """Rows whose output gets no gradient (the tokens no loss reads in the model's last block)
    are skipped in backward; the gradients stay the reference's, with the relative term and a
    bias too. Zero rows in full, partial and mixed blocks of the four-row backward."""
    x = relative(inputs(2, 3, T, D, seed=D + T), seed=T + 1)
    x["bias"] = 0.5 * torch.randn(3, T, T, generator=torch.Generator().manual_seed(2))
    zero = torch.rand(2, 3, T, generator=torch.Generator().manual_seed(3)) < 0.7
    zero[0, 0, :4] = True                                        # a whole block of four
    zero[1, 2, -1] = True                                        # the last row
    x["go"] = torch.where(zero[..., None], 0.0, x["go"])
    fused, ref = pair(kind)
    names = NAMES + REL + ["bias"]
    got, want = grads(fused, x, names), grads(ref, x, names)
    close(got, want, f"{kind} zero rows D={D} T={T}")
    assert not got[1][zero].any()                                # dq of a skipped row: 0


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("D,T", [(16, 9), (16, 70), (5, 12)])
def test_heads_read_and_written_in_place(kind, D, T, monkeypatch):
    """q, k, v as the head views of one projection [B, T, 3 H D] (lengen.ops.heads), the output
    gradient in the [B, T, H, D] layout the output projection gives: the kernel reads them
    where they are, writes its output in that layout and dq, dk, dv as the three slots of one
    buffer, which reaches the projection with no copy. Values and gradients are the
    reference's, with a bias and the relative term."""
    from lengen.ops import heads
    B, H = 2, 3
    x = relative(inputs(B, H, T, D, seed=D + 7 * T), seed=T)
    x["bias"] = 0.5 * torch.randn(H, T, T, generator=torch.Generator().manual_seed(5))
    x["qkv"] = torch.randn(B, T, 3 * H * D, generator=torch.Generator().manual_seed(6))
    go = torch.randn(B, T, H * D, generator=torch.Generator().manual_seed(7))
    seen = []
    real = heads.qkv_buffer
    monkeypatch.setattr(heads, "qkv_buffer", lambda *a: seen.append(real(*a)) or seen[-1])
    fused, ref = pair(kind)
    names = ["qkv", "gate", "pe", "bias"] + REL
    results = []
    for fn in (fused, ref):
        leaves = {n: x[n].clone().requires_grad_(True) for n in names}
        q, k, v = heads.split_heads(leaves["qkv"], H)
        out = fn(q, k, v, **{n: t for n, t in leaves.items() if n != "qkv"})
        if fn is fused:
            assert out.transpose(1, 2).is_contiguous()                  # [B, T, H, D] layout
        (out.transpose(1, 2).reshape(B, T, H * D) * go).sum().backward()
        results.append([out.detach()] + [torch.zeros_like(t) if t.grad is None else t.grad
                                         for t in leaves.values()])
    assert seen[0] is not None                        # the fused backward's slots: no copy
    close(*results, f"{kind} in place D={D} T={T}")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("D,T", [(16, 9), (16, 70), (5, 12)])
def test_kept_weights_give_the_remade_gradients(kind, D, T, monkeypatch):
    """Every kind keeps each row's weights in forward for backward (TRA makes its survivors'
    distances and CoPE its gates and buckets again from q . k, not their logits); with the
    budget at 0
    backward makes them again from q and k. Both give the same bits, with a bias, the relative
    term and rows without upstream gradient (the skipped blocks of the four-row backward)."""
    x = relative(inputs(2, 3, T, D, seed=3 * D + T), seed=T + 2)
    x["bias"] = 0.5 * torch.randn(3, T, T, generator=torch.Generator().manual_seed(4))
    zero = torch.rand(2, 3, T, generator=torch.Generator().manual_seed(5)) < 0.5
    x["go"] = torch.where(zero[..., None], 0.0, x["go"])
    fused, _ = pair(kind)
    names = NAMES + REL + ["bias"]
    made = []
    real = fused_rows.kept_weights
    monkeypatch.setattr(fused_rows, "kept_weights", lambda *a: made.append(real(*a)) or made[-1])
    kept = grads(fused, x, names)
    monkeypatch.setattr(fused_rows, "KEEP_WEIGHTS_BYTES", 0)
    remade = grads(fused, x, names)
    assert made[0] is not None and made[1] is None
    for i, (a, b) in enumerate(zip(kept, remade)):
        assert torch.equal(a, b), f"{kind} D={D} T={T}: item {i} differs"


def test_which_calls_keep_the_weights(monkeypatch):
    """Only a forward whose backward will run keeps them, and not past the budget:
    B H T (T + 1) / 2 floats."""
    assert fused_rows.kept_weights(2, 3, 5, True).numel() == 2 * 3 * 15
    assert fused_rows.kept_weights(2, 3, 5, False) is None
    monkeypatch.setattr(fused_rows, "KEEP_WEIGHTS_BYTES", 4 * 2 * 3 * 15 - 1)
    assert fused_rows.kept_weights(2, 3, 5, True) is None


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("D,T", [(16, 9), (16, 70), (5, 12)])
def test_rows_not_read_are_skipped(kind, D, T):
    """``rows``: the query rows whose outputs are read (the model's last block reads only the
    scored tokens). Those rows and every gradient are the reference's when the loss reads only
    them, with a bias and the relative term; the other rows come out 0."""
    x = relative(inputs(2, 3, T, D, seed=5 * D + T), seed=T + 3)
    x["bias"] = 0.5 * torch.randn(3, T, T, generator=torch.Generator().manual_seed(6))
    rows = torch.rand(2, T, generator=torch.Generator().manual_seed(7)) < 0.3
    rows[0, :4] = False                                          # a whole block of four left out
    rows[1, -1] = True
    x["go"] = torch.where(rows[:, None, :, None], x["go"], 0.0)  # the loss reads those rows only
    fused, ref = pair(kind)
    names = NAMES + REL + ["bias"]
    got = grads(lambda **kw: fused(**kw, rows=rows), x, names)
    want = grads(ref, x, names)
    want[0] = torch.where(rows[:, None, :, None], want[0], 0.0)
    close(got, want, f"{kind} rows D={D} T={T}")
    assert not got[0][~rows[:, None, :, None].expand_as(got[0])].any()


def test_rows_must_be_a_bool_mask_of_the_batch():
    x = inputs(2, 3, 5, 8)
    with pytest.raises(ValueError, match=r"bool \[B, T\] = \[2, 5\]"):
        fused_attention(x["q"], x["k"], x["v"], scale=1.0, rows=torch.ones(2, 5))
    with pytest.raises(ValueError, match=r"\[2, 5\]"):
        fused_attention(x["q"], x["k"], x["v"], scale=1.0, rows=torch.ones(3, 5, dtype=torch.bool))
