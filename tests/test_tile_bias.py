"""Transformer-XL's bias evaluated inside the tiles of the CPU training ops
(``lengen/ops/tile_bias.py``) against the dense hook on the dense reference ops.

For every tiled op (softmax causal / bidirectional, FoT, TRA, CoPE, Diff): outputs and the
gradients of q, k, v, the kind's extra input and XL's parameters (u, v, W_r), float64 and
float32, odd lengths, default and tiny tiles, two worker threads, identity / shifted / stepped
positions; both tiled forms (the Toeplitz window, ``path='table'``, and the low-rank trig form,
``path='trig'``, which also takes positions that are no progression). Also: each tiled form equals
the dense hook, XL offers the form its ``path`` names, and the modules take it in training.
"""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lengen.model import ModelConfig, Transformer
from lengen.ops.cope import cope_attention_naive
from lengen.ops.cope.fast_cpu import cope_attention_fast_cpu
from lengen.ops.diff import diff_attention_naive
from lengen.ops.diff.fast_cpu import diff_attention_fast_cpu
from lengen.ops.fot import fot_attention_naive
from lengen.ops.fot.fast_cpu import fot_attention_fast_cpu
from lengen.ops.softmax import softmax_attention_naive
from lengen.ops.softmax.fast_cpu import softmax_attention_fast_cpu
from lengen.ops.tile_bias import BiasHook, LowRankBias, RelativeBias, bias_inputs, tiled_bias
from lengen.ops.tra import tra_attention_naive
from lengen.ops.tra.fast_cpu import tra_attention_fast_cpu
from lengen.posenc.xl import TransformerXLRelative

B, H, D, RD = 2, 4, 4, 6
TOL = {torch.float64: 1e-10, torch.float32: 3e-5}             # max error / max(|reference|, 1)
TILES = {"default": {}, "tiny": dict(budget=700, qblock=16)}
FORMS = {"table": RelativeBias, "trig": LowRankBias}      # XL path -> the tiled form it offers


def _softmax(causal):
    return (lambda q, k, v, x, **kw: softmax_attention_fast_cpu(q, k, v, causal=causal, **kw),
            lambda q, k, v, x, **kw: softmax_attention_naive(q, k, v, causal=causal, **kw))


OPS = {   # kind -> (fast op, reference op, causal, extra input)
    "softmax_causal": (*_softmax(True), True, None),
    "softmax_bidir": (*_softmax(False), False, None),
    "fot": (fot_attention_fast_cpu, fot_attention_naive, True, "gate"),
    "tra": (tra_attention_fast_cpu, tra_attention_naive, True, "gate"),
    "cope": (cope_attention_fast_cpu, cope_attention_naive, True, "pos_emb"),
    "diff": (lambda q, k, v, lam, **kw: diff_attention_fast_cpu(q, k, v, lam, **kw),
             lambda q, k, v, lam, **kw: diff_attention_naive(q, k, v, lam, **kw), True, "lam"),
}


def make_pos(kind, T):
    base = torch.arange(T, dtype=torch.float32)
    if kind == "sorted":                  # randomized positions: a sorted draw, no progression
        g = torch.Generator().manual_seed(T)
        return torch.randperm(4 * T, generator=g)[:T].sort().values.float()
    return {"identity": base, "shifted": base + 5.0, "stepped": 3.0 * base - 2.0,
            "fractional": 0.5 * base + 0.25}[kind]


def make_inputs(kind, T, dtype, seed=0):
    g = torch.Generator().manual_seed(31 * T + seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=dtype)    # noqa: E731
    x = dict(q=r(B, H, T, D), k=r(B, H, T, D), v=r(B, H, T, D))
    extra = OPS[kind][3]
    if extra == "gate":
        x["extra"] = F.logsigmoid(r(B, H, T))
    elif extra == "pos_emb":
        x["q"], x["k"], x["extra"] = 2 * x["q"], 2 * x["k"], r(D, 7)   # clamped positions too
    elif extra == "lam":
        x["v"], x["extra"] = r(B, H // 2, T, 2 * D), torch.tensor(0.37, dtype=dtype)
    params = dict(u=r(H, D), v=r(H, D), w_r=r(H * D, RD))
    return x, params


def run(kind, x, params, pos, mode, path="table", **tile_kw):
    """mode 'tiled': fast op with XL's tiled form; 'dense': fast op, dense hook only;
    'reference': the dense reference op. Returns [out, grads of q, k, v, extra, u, v, W_r]."""
    fast, ref, causal, extra = OPS[kind]
    x = {n: t.clone().requires_grad_(True) for n, t in x.items()}
    xl = TransformerXLRelative(d_model=H * D, n_heads=H, head_dim=D, causal=causal, rel_dim=RD,
                               path=path).to(x["q"].dtype)
    with torch.no_grad():
        xl.u.copy_(params["u"]), xl.v.copy_(params["v"]), xl.w_r.weight.copy_(params["w_r"])
    q, k = x["q"], x["k"]
    if mode == "tiled":                               # the form the path names is the one used
        assert isinstance(xl.tiled_bias(pos, q, k), FORMS[path])
    tiled = (lambda: xl.tiled_bias(pos, q, k)) if mode == "tiled" else None
    hook = BiasHook(lambda s, e: xl.bias(pos[s:e], pos, q[:, :, s:e], k), tiled)
    args = (q, k, x["v"]) + ((x["extra"],) if extra else (None,))
    kw = dict(tile_kw) if mode != "reference" else {}
    if kind == "diff":
        kw.pop("budget", None), kw.pop("qblock", None)       # diff's op takes no tile sizes
    out = (ref if mode == "reference" else fast)(*args, bias_fn=hook, **kw)
    go = torch.randn(out.shape, generator=torch.Generator().manual_seed(5), dtype=out.dtype)
    (out * go).sum().backward()
    tensors = [q, k, x["v"]] + ([x["extra"]] if extra else []) + [xl.u, xl.v, xl.w_r.weight]
    return [out.detach()] + [torch.zeros_like(t) if t.grad is None else t.grad for t in tensors]


def assert_matches(got, ref, dtype, what):
    assert len(got) == len(ref)
    for i, (a, b) in enumerate(zip(got, ref)):
        assert a.shape == b.shape and torch.isfinite(a).all(), f"{what}: output {i}"
        err = (a - b).abs().max().item()
        scale = max(b.abs().max().item(), 1.0)
        assert err <= TOL[dtype] * scale, f"{what}: output {i} off by {err:.2e} (scale {scale:.1e})"


@pytest.mark.parametrize("kind", list(OPS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("T", [1, 37, 111])
@pytest.mark.parametrize("tiles", list(TILES))
@pytest.mark.parametrize("path", list(FORMS))
def test_tiled_xl_matches_dense_reference(kind, dtype, T, tiles, path):
    x, params = make_inputs(kind, T, dtype)
    pos = make_pos("identity", T)
    got = run(kind, x, params, pos, "tiled", path, **TILES[tiles])
    assert_matches(got, run(kind, x, params, pos, "reference", path), dtype,
                   f"{kind} T={T} {tiles} {path}")
    if dtype == torch.float64:              # and the same op reading the dense bias
        assert_matches(got, run(kind, x, params, pos, "dense", path, **TILES[tiles]), dtype,
                       "dense")


@pytest.mark.parametrize("kind", ["softmax_causal", "softmax_bidir", "tra", "cope"])
@pytest.mark.parametrize("pos_kind, path", [("shifted", "table"), ("stepped", "table"),
                                            ("stepped", "trig"), ("sorted", "trig"),
                                            ("fractional", "trig")])
def test_tiled_xl_other_positions(kind, pos_kind, path):
    x, params = make_inputs(kind, 45, torch.float64, seed=1)
    pos = make_pos(pos_kind, 45)
    assert_matches(run(kind, x, params, pos, "tiled", path, budget=700, qblock=16),
                   run(kind, x, params, pos, "reference", path), torch.float64,
                   f"{kind} {pos_kind} {path}")


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("kind", list(OPS))
@pytest.mark.parametrize("path", list(FORMS))
def test_tiled_xl_worker_threads(kind, path, two_threads):
    """Groups of different batch indices on two worker threads add into one table gradient
    (Toeplitz) or write their own rows of ``left``'s gradient (low rank)."""
    x, params = make_inputs(kind, 70, torch.float64, seed=2)
    pos = make_pos("identity", 70)
    got = run(kind, x, params, pos, "tiled", path, budget=700, qblock=16)
    assert torch.get_num_threads() == 2
    assert_matches(got, run(kind, x, params, pos, "reference", path), torch.float64,
                   f"{kind} threads {path}")


def make_xl(path="auto", rel_dim=RD):
    xl = TransformerXLRelative(d_model=H * D, n_heads=H, head_dim=D, causal=True,
                               rel_dim=rel_dim, path=path).double()
    with torch.no_grad():
        for p in xl.parameters():
            p.normal_(generator=torch.Generator().manual_seed(3))
    return xl


@pytest.mark.parametrize("pos_kind, path", [("identity", "table"), ("shifted", "table"),
                                            ("stepped", "table"), ("identity", "trig"),
                                            ("sorted", "trig"), ("fractional", "trig")])
def test_tiled_form_dense_equals_hook(pos_kind, path):
    T = 29
    xl = make_xl(path)
    pos = make_pos(pos_kind, T)
    q, k = (torch.randn(B, H, T, D, dtype=torch.float64) for _ in range(2))
    rb = xl.tiled_bias(pos, q, k)
    assert isinstance(rb, FORMS[path])
    torch.testing.assert_close(rb.dense(), xl.bias(pos, pos, q, k), atol=1e-12, rtol=1e-10)


def test_tiled_form_each_path_offers():
    T = 20
    q, k = (torch.randn(B, H, T, D, dtype=torch.float64) for _ in range(2))
    ident, sorted_, frac = (make_pos(kind, T) for kind in ("identity", "sorted", "fractional"))
    # auto: the Toeplitz window where toeplitz_tiles_cheaper (3 x 2 x hd < 2 x rel_dim), else
    # the low-rank form; positions that are no progression always take the low-rank form
    assert isinstance(make_xl(rel_dim=16).tiled_bias(ident, q, k), RelativeBias)   # 24 < 32
    assert isinstance(make_xl(rel_dim=6).tiled_bias(ident, q, k), LowRankBias)     # 24 > 12
    for pos in (sorted_, frac):
        assert isinstance(make_xl(rel_dim=16).tiled_bias(pos, q, k), LowRankBias)
    assert isinstance(make_xl("table", rel_dim=6).tiled_bias(ident, q, k), RelativeBias)
    assert isinstance(make_xl("trig", rel_dim=16).tiled_bias(ident, q, k), LowRankBias)
    # table with no progression, per-sequence positions: dense
    for pos in (sorted_, frac):
        assert make_xl("table").tiled_bias(pos, q, k) is None
    assert make_xl("trig").tiled_bias(ident.expand(B, T), q, k) is None
    # rank distances have no trig form: the Toeplitz window on a progression, else dense
    for path, rel_dim in (("trig", 16), ("auto", 6)):
        rank = make_xl(path, rel_dim)
        rank.relative = "rank"
        assert rank.tiled_bias(sorted_, q, k) is None
        assert rank.tiled_bias(ident, q, k) is None
    rank = make_xl("auto", 16)
    rank.relative = "rank"
    assert isinstance(rank.tiled_bias(ident, q, k), RelativeBias)
    # the op-side accessor: plain callables and non-square calls have no tiled form
    hook = BiasHook(lambda s, e: None, lambda: make_xl("table").tiled_bias(ident, q, k))
    assert tiled_bias(lambda s, e: None, T, T) is None
    assert tiled_bias(hook, T, T + 1) is None
    assert tiled_bias(hook, T, T) is not None


@pytest.mark.parametrize("attention", ["softmax", "fot", "tra", "cope", "diff"])
@pytest.mark.parametrize("path", list(FORMS))
def test_model_training_step_tiled_equals_naive(attention, path, monkeypatch):
    """A 2-layer XL model trained with impl='auto' (tiled ops, tiled XL) gives the logits and
    parameter gradients of impl='naive' (dense hook, dense references); the tiled form is used."""
    import lengen.posenc.xl as xl_module
    calls = []
    orig = xl_module.TransformerXLRelative.tiled_bias
    monkeypatch.setattr(xl_module.TransformerXLRelative, "tiled_bias",
                        lambda self, *a: calls.append(1) or orig(self, *a))
    res = {}
    for impl in ("naive", "auto"):
        torch.manual_seed(0)
        model = Transformer(ModelConfig(vocab_size=7, d_model=16, n_layers=2, n_heads=4,
                                        posenc="xl", attention=attention, attn_impl=impl,
                                        posenc_kwargs={"path": path},
                                        init_std=0.3)).double().train()
        with torch.no_grad():
            g = torch.Generator().manual_seed(1)
            for p in model.parameters():
                if p.numel() and not p.any():
                    p.copy_(0.3 * torch.randn(p.shape, generator=g))
        tokens = torch.randint(0, 7, (3, 41), generator=torch.Generator().manual_seed(2))
        logits = model(tokens)
        (logits * torch.linspace(-1, 1, 7, dtype=torch.float64)).sum().backward()
        res[impl] = [logits.detach()] + [p.grad for p in model.parameters()]
    assert len(calls) == 2                                  # once per layer, auto only
    for a, b in zip(res["auto"], res["naive"]):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-8)


@pytest.mark.parametrize("path", list(FORMS))
def test_fp32_bias_at_large_positions(path):
    """Angles are formed in float64, so fp32 keeps its own rounding even where an fp32 angle
    (a position or distance in the thousands) would be off by ~1e-4 rad: the dense hook and
    the tiled form in fp32 match the float64 bias (both fail with fp32 angles)."""
    T = 64
    xl64 = make_xl(path, rel_dim=16)
    xl32 = make_xl(path, rel_dim=16).float()
    pos = 300.0 * torch.arange(T, dtype=torch.float64) + 8000.0   # distances up to 18,900
    q, k = (torch.randn(B, H, T, D, dtype=torch.float64) for _ in range(2))
    ref = xl64.bias(pos, pos, q, k)
    scale = max(ref.abs().max().item(), 1.0)
    for got in (xl32.bias(pos.float(), pos.float(), q.float(), k.float()),
                xl32.tiled_bias(pos.float(), q.float(), k.float()).dense()):
        assert (got.double() - ref).abs().max().item() <= 1e-5 * scale


def test_low_rank_key_features_must_be_constant():
    T = 9
    left = torch.randn(1, H, T, 3, requires_grad=True)
    right = torch.randn(T, 3, requires_grad=True)
    hook = BiasHook(lambda s, e: None, lambda: LowRankBias(left, right))
    with pytest.raises(ValueError, match="constant"):
        bias_inputs(hook, T, T)
