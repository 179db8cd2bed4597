"""CPU training paths (``lengen/ops/*/fast_cpu.py``) against the dense references.

Outputs and every gradient (q, k, v, log-gate / log-forget, a learnable bias passed through
``bias_fn``), float64 and float32, odd lengths, default tiles and tiny tiles (so that query blocks,
head groups and batch groups all occur), TRA rows without a surviving key, and the modules'
default path selection. The references themselves are checked against loop-over-positions code in
``test_ops_tra.py`` / ``test_ops_fot.py``.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lengen.attention.fot import ForgettingAttention
from lengen.attention.softmax import SoftmaxAttention
from lengen.attention.tra import ThresholdRelativeAttention
from lengen.ops.cpu_tiles import plan_tiles, tile_numel
from lengen.ops.fot import fot_attention_naive
from lengen.ops.fot.fast_cpu import fot_attention_fast_cpu
from lengen.ops.softmax import softmax_attention_naive
from lengen.ops.softmax.fast_cpu import softmax_attention_fast_cpu
from lengen.ops.tra import tra_attention_naive
from lengen.ops.tra.fast_cpu import tra_attention_fast_cpu
from lengen.posenc import build_posenc

B, H, D = 2, 3, 8
TILES = {"default": {}, "tiny": dict(budget=600, qblock=16)}   # tiny: many blocks and groups
TOL = {torch.float64: 1e-10, torch.float32: 2e-5}             # max error / max |reference|


def make_inputs(T, dtype, seed=0, gate_scale=1.0):
    g = torch.Generator().manual_seed(1000 * seed + T)
    r = lambda *s: torch.randn(*s, generator=g, dtype=dtype)    # noqa: E731
    x = dict(q=r(B, H, T, D), k=r(B, H, T, D), v=r(B, H, T, D),
             gate=F.logsigmoid(gate_scale * r(B, H, T)), bias=0.5 * r(H, T, T))
    return x, r(B, H, T, D)


def run(op, x, grad_out, use_bias, **kw):
    """op(q, k, v, gate, bias_fn=..., **kw) -> out; returns [out, grads...] (zeros if unused)."""
    x = {n: t.clone().requires_grad_(True) for n, t in x.items()}
    bias_fn = (lambda s, e: x["bias"][:, s:e]) if use_bias else None
    out = op(x["q"], x["k"], x["v"], x["gate"], bias_fn=bias_fn, **kw)
    (out * grad_out).sum().backward()
    names = ["q", "k", "v", "gate"] + (["bias"] if use_bias else [])
    return [out.detach()] + [torch.zeros_like(x[n]) if x[n].grad is None else x[n].grad
                             for n in names]


def assert_matches(got, ref, dtype, what):
    names = ["out", "dq", "dk", "dv", "dgate", "dbias"]
    for name, a, b in zip(names, got, ref):
        assert torch.isfinite(a).all(), f"{what}: non-finite {name}"
        err = (a - b).abs().max().item()
        scale = max(b.abs().max().item(), 1.0)
        assert err <= TOL[dtype] * scale, f"{what}: {name} off by {err:.2e} (scale {scale:.2e})"


def softmax_op(causal):
    def op(q, k, v, gate, bias_fn=None, **kw):
        return softmax_attention_fast_cpu(q, k, v, causal=causal, bias_fn=bias_fn, **kw)

    def ref(q, k, v, gate, bias_fn=None):
        return softmax_attention_naive(q, k, v, causal=causal, bias_fn=bias_fn)
    return op, ref


OPS = {
    "tra": (tra_attention_fast_cpu, tra_attention_naive),
    "fot": (fot_attention_fast_cpu, fot_attention_naive),
    "softmax_causal": softmax_op(True),
    "softmax_bidir": softmax_op(False),
}


@pytest.mark.parametrize("kind", list(OPS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("T", [1, 63, 111, 300])
@pytest.mark.parametrize("use_bias", [False, True])
@pytest.mark.parametrize("tiles", list(TILES))
def test_fast_matches_reference(kind, dtype, T, use_bias, tiles):
    fast, ref = OPS[kind]
    x, go = make_inputs(T, dtype)
    assert_matches(run(fast, x, go, use_bias, **TILES[tiles]), run(ref, x, go, use_bias), dtype,
                   f"{kind} T={T} bias={use_bias} tiles={tiles}")


@pytest.mark.parametrize("kind", ["tra", "fot"])
def test_strong_decay_float32_as_accurate_as_reference(kind):
    """Log gates around -3..-20 push far keys' weights below e^-60 (the exp floor) and into fp32
    underflow; FoT's cumulative decay reaches ~1e3, where fp32 logits lose ~1e-5. Both float32
    paths are measured against the float64 reference: the fast one may not be much worse."""
    fast, ref = OPS[kind]
    x, go = make_inputs(111, torch.float32, seed=3, gate_scale=8.0)
    x["gate"] = x["gate"] - 3.0
    exact = run(ref, {n: t.double() for n, t in x.items()}, go.double(), True)

    def errors(op):
        return [((a.double() - b).abs().max() / max(b.abs().max(), 1.0)).item()
                for a, b in zip(run(op, x, go, True), exact)]
    for name, e_fast, e_ref in zip(["out", "dq", "dk", "dv", "dgate", "dbias"], errors(fast),
                                   errors(ref)):
        assert e_fast <= max(3 * e_ref, 2e-6), \
            f"{kind} {name}: {e_fast:.1e} vs reference {e_ref:.1e}"


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("tiles", list(TILES))
def test_tra_empty_rows(dtype, tiles):
    """Rows without a surviving key: exactly zero output, zero gradient, no NaN anywhere."""
    T = 63
    x, go = make_inputs(T, dtype, seed=1)
    x["q"][0, 1] = 0.0                                  # a whole head: every score 0, none > 0
    x["k"][1, 0, :5] = x["k"][1, 0, :5].abs()           # rows 0..4 of (batch 1, head 0): every
    x["q"][1, 0, :5] = -x["q"][1, 0, :5].abs()          # key they can see scores < 0
    got = run(tra_attention_fast_cpu, x, go, True, **TILES[tiles])
    ref = run(tra_attention_naive, x, go, True)
    assert_matches(got, ref, dtype, "tra empty rows")
    out, dq, dk, dv, dgate, dbias = got
    assert (out[0, 1] == 0).all() and (out[1, 0, :5] == 0).all()
    assert (dq[0, 1] == 0).all() and (dq[1, 0, :5] == 0).all()
    assert (dgate[0, 1] == 0).all() and (dgate[1, 0, :5] == 0).all()
    assert out[1, 0, 5:].abs().sum() > 0                # later rows of that head do attend


@pytest.fixture
def two_threads():
    """torch with 2 intra-op threads: the ops then share tile groups among 2 worker threads."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("kind", list(OPS))
@pytest.mark.parametrize("tiles", list(TILES))
def test_worker_threads_match_reference(kind, tiles, two_threads):
    """Groups run on worker threads; the bias is shared over the batch, so groups of different
    batch indices add into the same bias gradient (per-thread accumulators)."""
    fast, ref = OPS[kind]
    x, go = make_inputs(111, torch.float64, seed=4)
    got = run(fast, x, go, True, **TILES[tiles])
    assert torch.get_num_threads() == 2                 # the workers did not change ours
    assert_matches(got, run(ref, x, go, True), torch.float64, f"{kind} threads tiles={tiles}")


def test_tra_future_keys_get_no_weight():
    """A change to future keys/values must not move any earlier output by even one ulp."""
    x, _ = make_inputs(63, torch.float32, seed=2)
    out1 = tra_attention_fast_cpu(x["q"], x["k"], x["v"], x["gate"])
    k2, v2 = x["k"].clone(), x["v"].clone()
    k2[:, :, 40:] = 100 * torch.randn_like(k2[:, :, 40:])
    v2[:, :, 40:] = 1e6
    out2 = tra_attention_fast_cpu(x["q"], k2, v2, x["gate"])
    assert torch.equal(out1[:, :, :40], out2[:, :, :40])


def test_second_backward_raises():
    x, go = make_inputs(31, torch.float64)
    q = x["q"].requires_grad_()
    out = tra_attention_fast_cpu(q, x["k"], x["v"], x["gate"])
    (out * go).sum().backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="backward called twice"):
        (out * go).sum().backward()


def test_interleaved_calls_reuse_buffers_correctly():
    """Two forwards before their backwards (two layers), twice: pooled buffers must not mix."""
    x, go = make_inputs(111, torch.float64)
    ref = run(tra_attention_naive, x, go, False)
    for _ in range(2):
        xs = [{n: t.clone().requires_grad_(True) for n, t in x.items()} for _ in range(2)]
        outs = [tra_attention_fast_cpu(a["q"], a["k"], a["v"], a["gate"]) for a in xs]
        ((outs[0] + outs[1]) * go).sum().backward()
        for a, o in zip(xs, outs):
            assert_matches([o.detach(), a["q"].grad, a["k"].grad, a["v"].grad, a["gate"].grad],
                           ref, torch.float64, "interleaved")


def test_plan_tiles_covers_every_query_once():
    for B_, H_, T, budget, qb in [(2, 3, 1, 600, 16), (3, 4, 300, 600, 16),
                                  (2, 4, 512, 1 << 18, 128),
                                  (5, 2, 63, 1 << 18, 128)]:
        seen = torch.zeros(B_, H_, T, dtype=torch.long)
        for (b0, b1, h0, h1), blocks in plan_tiles(B_, H_, T, budget=budget, qblock=qb):
            assert b1 - b0 == 1 or (h0, h1) == (0, H_)           # flattens without a copy
            for s, e, ke in blocks:
                assert ke == e
                seen[b0:b1, h0:h1, s:e] += 1
        assert (seen == 1).all()
    # causal tiles skip the invisible keys: at T=512 and 128-row blocks, 5/8 of the square
    assert tile_numel(plan_tiles(1, 1, 512, qblock=128)) == 512 * 512 * 5 // 8


@pytest.mark.parametrize("cls,kw", [(ThresholdRelativeAttention, {}), (ForgettingAttention, {}),
                                    (SoftmaxAttention, {})])
@pytest.mark.parametrize("posenc", ["nope", "alibi", "t5", "kerple_log", "fire"])
def test_modules_auto_equals_naive(cls, kw, posenc):
    """impl='auto' in training (fast path on CPU) equals impl='naive': outputs, parameter grads."""
    torch.manual_seed(0)
    d, T = 32, 45
    pe = build_posenc(posenc, d_model=d, n_heads=4, head_dim=8, causal=True).double()
    if posenc == "t5":
        torch.nn.init.normal_(pe.table.weight)
    mods = {}
    for impl in ("naive", "auto"):
        torch.manual_seed(1)
        mods[impl] = cls(d_model=d, n_heads=4, impl=impl, **kw).double().train()
    x = torch.randn(3, T, d, dtype=torch.float64)
    pos = torch.arange(T, dtype=torch.float64)
    res = {}
    for impl, m in mods.items():
        pe.zero_grad()
        y = m(x, pos, pe)
        (y * torch.linspace(-1, 1, d, dtype=torch.float64)).sum().backward()
        res[impl] = [y.detach()] + [p.grad.clone() for p in m.parameters()] + \
                    [p.grad.clone() for p in pe.parameters() if p.grad is not None]
    assert len(res["auto"]) == len(res["naive"])
    for a, b in zip(res["auto"], res["naive"]):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-8)


def test_default_training_op_is_fast_on_cpu():
    q = torch.zeros(1, 1, 2, 2)
    assert ThresholdRelativeAttention.ops.training(q) is tra_attention_fast_cpu
    assert ForgettingAttention.ops.training(q) is fot_attention_fast_cpu
