"""KerpleLog (Chi et al. 2022): b(i, j) = -r1 log(1 + r2 |i - j|) per head, r1, r2 > 0.

The bias is checked against a loop over (i, j) written from the formula; the Toeplitz fast path
against the pairwise ``_reference_bias`` (values and gradients); per-sequence ``[B, T]``
positions; the KERPLE code's in-place clamp and initialisation; bad kwargs; and a model with
every position sampler.
"""
from __future__ import annotations

import math

import pytest
import torch

import lengen.posenc.kerple_log as kerple_module
from lengen.model import ModelConfig, Transformer
from lengen.posenc import KerpleLog
from lengen.samplers import SAMPLERS, RandomizedSampler
from reference_loops import sampler_test_kwargs

H, D = 3, 4
F64 = dict(rtol=1e-12, atol=1e-12)


def make(causal=True, seed=0, **kw):
    torch.manual_seed(seed)
    return KerpleLog(d_model=H * D, n_heads=H, head_dim=D, causal=causal, **kw).double()


def make_pos(kind, T, seed=0):
    g = torch.Generator().manual_seed(seed)
    if kind == "identity":
        return torch.arange(T, dtype=torch.float32)
    if kind == "shifted":
        return torch.arange(T, dtype=torch.float32) + 13.0
    if kind == "stepped":
        return torch.arange(T, dtype=torch.float32) * 3.0 - 7.0
    if kind == "randomized":
        return RandomizedSampler(4 * T + 5).sample(T, training=True, generator=g)
    if kind == "unsorted":
        return RandomizedSampler(4 * T + 5, sort=False).sample(T, training=True, generator=g)
    if kind == "fractional":
        return torch.arange(T, dtype=torch.float32) * 0.37 + 0.5
    raise ValueError(kind)


KINDS = ["identity", "shifted", "stepped", "randomized", "unsorted", "fractional"]


def loop_bias(scheme, pos_q, pos_k):
    """-r1_h log(1 + r2_h |i - j|), one (h, i, j) at a time in Python floats."""
    r1 = [max(v, scheme.min_value) for v in scheme.r1.tolist()]
    r2 = [max(v, scheme.min_value) for v in scheme.r2.tolist()]
    out = torch.empty(H, len(pos_q), len(pos_k), dtype=torch.float64)
    for h in range(H):
        for a, i in enumerate(pos_q.tolist()):
            for b, j in enumerate(pos_k.tolist()):
                out[h, a, b] = -r1[h] * math.log(1.0 + r2[h] * abs(i - j))
    return out


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("kind", KINDS)
def test_bias_equals_the_formula_loop(kind, causal):
    scheme = make(causal)
    pos = make_pos(kind, 17)
    for pq in (pos, pos[4:9]):
        torch.testing.assert_close(scheme.bias(pq, pos), loop_bias(scheme, pq, pos), **F64)
    # log distances: every head decreases with distance, nothing is constant
    b = scheme.bias(make_pos("identity", 9), make_pos("identity", 9))
    assert (b[:, 8, 1:] > b[:, 8, :-1]).all()


def value_and_grads(scheme, fn, pq, pk, seed=1):
    scheme.zero_grad()
    b = fn(pq, pk)
    G = torch.randn(b.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    (b * G).sum().backward()
    return b.detach(), [scheme.r1.grad.clone(), scheme.r2.grad.clone()]


# (T, query rows start, end): all rows, a chunk, a single row (end None = T); odd T
SHAPES = [(1, 0, None), (63, 0, None), (63, 5, 17), (63, 20, 21), (111, 0, None), (111, 40, 97)]


@pytest.mark.parametrize("T,start,end", SHAPES)
@pytest.mark.parametrize("kind", KINDS)
def test_fast_path_matches_pairwise_values_and_grads(T, start, end, kind):
    scheme = make()
    pos = make_pos(kind, T)
    pq = pos[start:end or T]
    b, g = value_and_grads(scheme, scheme.bias, pq, pos)
    rb, rg = value_and_grads(scheme, scheme._reference_bias, pq, pos)
    assert b.shape == (H, pq.numel(), T)
    torch.testing.assert_close(b, rb, **F64)
    for a, r in zip(g, rg):
        torch.testing.assert_close(a, r, **F64)
        assert r.abs().sum() > 0 or T == 1


def test_evenly_stepped_positions_use_the_toeplitz_view(monkeypatch):
    calls = []
    orig = kerple_module.toeplitz
    monkeypatch.setattr(kerple_module, "toeplitz", lambda *a: calls.append(a[1:]) or orig(*a))
    scheme = make()
    for kind in ("identity", "shifted", "stepped"):
        pos = make_pos(kind, 30)
        scheme.bias(pos[3:10], pos)
    assert calls == [(7, 30)] * 3
    tables = []
    orig_table = KerpleLog._distance_table

    def table(self, *a):
        out = orig_table(self, *a)
        tables.append(out is not None)
        return out

    monkeypatch.setattr(KerpleLog, "_distance_table", table)
    for kind in ("randomized", "unsorted", "fractional"):
        pos = make_pos(kind, 30)
        scheme.bias(pos, pos)
    scheme.bias(torch.stack([make_pos("randomized", 30, s) for s in range(2)]),
                torch.stack([make_pos("randomized", 30, s) for s in range(2)]))
    wide = torch.tensor([0.0, 1000.0, 3.0])               # 1001 distances > 9 pairs
    torch.testing.assert_close(scheme.bias(wide, wide), scheme._reference_bias(wide, wide), **F64)
    # integer positions: one value per distance, gathered; fractional ones: every pair
    assert len(calls) == 3 and tables == [True, True, True, False]


@pytest.mark.parametrize("T", [1, 63])
def test_per_sequence_positions(T):
    scheme = make()
    rows = [make_pos("randomized", T, seed=s) for s in range(3)]
    pos = torch.stack(rows)                                                    # [B, T]
    b, g = value_and_grads(scheme, scheme.bias, pos, pos)
    rb, rg = value_and_grads(scheme, scheme._reference_bias, pos, pos)
    assert b.shape == (3, H, T, T)
    torch.testing.assert_close(b, rb, **F64)
    for a, r in zip(g, rg):
        torch.testing.assert_close(a, r, **F64)
    # each row is that sequence's own shared-position bias
    for i, row in enumerate(rows):
        torch.testing.assert_close(b[i], scheme.bias(row, row).detach(), **F64)
    # equal rows give exactly the [T] result
    same = make_pos("identity", T).expand(4, T)
    assert torch.equal(scheme.bias(same, same), scheme.bias(same[0], same[0]).expand(4, -1, -1, -1))


def test_kerple_code_initialisation_and_fixed_values():
    torch.manual_seed(0)
    schemes = [KerpleLog(d_model=64, n_heads=16, head_dim=4) for _ in range(20)]
    r1 = torch.cat([s.r1.detach() for s in schemes])
    r2 = torch.cat([s.r2.detach() for s in schemes])
    # r1 = 2 U(0, 1), r2 = U(0, 1): ranges and means (320 draws each)
    assert 0 <= r1.min() and r1.max() < 2 and abs(float(r1.mean()) - 1.0) < 0.1
    assert 0 <= r2.min() and r2.max() < 1 and abs(float(r2.mean()) - 0.5) < 0.05
    fixed = KerpleLog(d_model=8, n_heads=2, head_dim=4, r1_init=1.5, r2_init=0.25)
    assert fixed.r1.tolist() == [1.5, 1.5] and fixed.r2.tolist() == [0.25, 0.25]


def test_clamp_is_in_place_and_keeps_the_gradient():
    scheme = make(r1_init=1.0, r2_init=0.5)
    with torch.no_grad():
        scheme.r1[0] = -0.3                       # e.g. after an optimizer step
        scheme.r2[1] = 0.001
    pos = make_pos("identity", 12)
    b, g = value_and_grads(scheme, scheme.bias, pos, pos)
    assert scheme.r1[0].item() == pytest.approx(0.01) and scheme.r2[1].item() == pytest.approx(0.01)
    assert scheme.r1[1].item() == 1.0 and scheme.r2[0].item() == 0.5        # others untouched
    torch.testing.assert_close(b, loop_bias(scheme, pos, pos), **F64)
    # the gradient is the formula's at the clamped value (not zero, as a functional clamp gives)
    assert g[0][0] != 0 and g[1][1] != 0
    # no clamp needed: no in-place write at all (so saved tensors of earlier layers stay valid)
    v1, v2 = scheme.r1._version, scheme.r2._version
    scheme.bias(pos, pos)
    assert (scheme.r1._version, scheme.r2._version) == (v1, v2)


def test_shared_scheme_trains_after_a_step_below_the_floor():
    """One instance serves every layer; the clamp at the first layer's call must not invalidate
    what autograd saved, and an optimizer step that pushes r1 below 0.01 is repaired."""
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=5, d_model=16, n_layers=3, n_heads=2,
                                    posenc="kerple_log"))
    tokens = torch.randint(0, 5, (2, 10))
    with torch.no_grad():
        model.posenc.r1.fill_(-1.0)
    model(tokens).logsumexp(-1).sum().backward()
    assert torch.equal(model.posenc.r1.detach(), torch.full((2,), 0.01))
    assert model.posenc.r1.grad.abs().sum() > 0 and model.posenc.r2.grad.abs().sum() > 0


@pytest.mark.parametrize("kwargs,key", [
    (dict(min_value=0.0), "min_value"), (dict(min_value=-1), "min_value"),
    (dict(r1_init=0), "r1_init"), (dict(r2_init=-0.5), "r2_init"), (dict(r2_init="x"), "r2_init"),
    (dict(r1_init=float("inf")), "r1_init"), (dict(r1_init=True), "r1_init"),
])
def test_bad_kwargs_name_the_key(kwargs, key):
    with pytest.raises(ValueError,
                       match=rf"posenc_kwargs\.{key} must be a finite number > 0.*use e\.g\."):
        KerpleLog(d_model=8, n_heads=2, head_dim=4, **kwargs)
    with pytest.raises(ValueError, match=rf"posenc_kwargs\.{key}"):
        Transformer(ModelConfig(vocab_size=5, d_model=8, n_heads=2, n_layers=1,
                                posenc="kerple_log", posenc_kwargs=kwargs))


@pytest.mark.parametrize("sampler", list(SAMPLERS))
@pytest.mark.parametrize("causal", [True, False])
def test_model_runs_with_every_sampler(sampler, causal):
    torch.manual_seed(0)
    kw = sampler_test_kwargs(sampler)
    model = Transformer(ModelConfig(vocab_size=5, d_model=16, n_layers=2, n_heads=2,
                                    posenc="kerple_log", positions=sampler, positions_kwargs=kw,
                                    causal=causal))
    tokens = torch.randint(0, 5, (2, 20))
    for mode in (True, False):
        model.train(mode)
        out = model(tokens)
        assert out.shape == (2, 20, 5) and torch.isfinite(out).all()
    model.train()
    model(tokens).sum().backward()
    assert model.posenc.r1.grad.abs().sum() > 0
