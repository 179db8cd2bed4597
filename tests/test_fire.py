"""FIRE (Li et al. 2023; Zhou et al. 2024): b(i, j) = f(psi(i - j) / psi(max(L, i))),
psi(x) = log(c x + 1), f an MLP 1 -> hidden -> heads with ReLU.

The bias is checked against a loop over (h, i, j) written from that formula in Python floats; the
fast paths (piecewise-linear MLP, Toeplitz and distance-table expansion) against the pairwise
``_reference_bias`` (values and gradients of the MLP weights, c and L); per-sequence positions;
the normaliser's behaviour; bad kwargs; the per-layer option; every position sampler.
"""
from __future__ import annotations

import math

import pytest
import torch

import lengen.posenc.fire as fire_module
from lengen.model import ModelConfig, Transformer
from lengen.posenc import FIRE
from lengen.samplers import SAMPLERS, RandomizedSampler
from reference_loops import sampler_test_kwargs

H, D = 3, 4
F64 = dict(rtol=1e-10, atol=1e-10)


def make(causal=True, seed=0, L=512.0, c=0.1, hidden=8):
    torch.manual_seed(seed)
    return FIRE(d_model=H * D, n_heads=H, head_dim=D, causal=causal, hidden=hidden, c_init=c,
                L_init=L).double()


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
    """The paper's formula one (h, i, j) at a time in Python floats; keys right of the query
    (i < j) use -log(c (j - i) + 1), the documented odd extension."""
    c, L = math.exp(scheme.log_c.item()), math.exp(scheme.log_L.item())
    w1, b1 = scheme.w1.tolist(), scheme.b1.tolist()
    w2, b2 = scheme.w2.tolist(), scheme.b2.tolist()

    def psi(x):
        return math.log(c * x + 1) if x >= 0 else -math.log(c * -x + 1)

    out = torch.empty(H, len(pos_q), len(pos_k), dtype=torch.float64)
    for a, i in enumerate(pos_q.tolist()):
        for b, j in enumerate(pos_k.tolist()):
            x = psi(i - j) / psi(max(L, i))
            hidden = [max(0.0, w * x + bb) for w, bb in zip(w1, b1)]
            for h in range(H):
                out[h, a, b] = sum(w * z for w, z in zip(w2[h], hidden)) + b2[h]
    return out


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("L", [512.0, 9.5])
@pytest.mark.parametrize("kind", KINDS)
def test_bias_equals_the_formula_loop(kind, L, causal):
    scheme = make(causal, L=L)
    pos = make_pos(kind, 17)
    for pq in (pos, pos[4:9]):
        torch.testing.assert_close(scheme.bias(pq, pos), loop_bias(scheme, pq, pos), **F64)


def test_normaliser_is_the_query_position_beyond_L():
    scheme = make(L=10.0)
    pos = torch.tensor([0.0, 3.0, 7.0, 10.0, 20.0, 40.0, 80.0])
    b = scheme.bias(pos, pos).detach()
    f = lambda x: scheme.mlp(torch.tensor([x], dtype=torch.float64)).detach()[:, 0]  # noqa: E731
    # distance 0 -> f(0) on every row; a query beyond L seeing position 0 -> f(1) exactly
    for r in range(len(pos)):
        torch.testing.assert_close(b[:, r, r], f(0.0), **F64)
    for r in (4, 5, 6):
        torch.testing.assert_close(b[:, r, 0], f(1.0), **F64)
    # rows i <= L share psi(L): the bias depends on i - j alone there (7 - 3 as 10 - 6) ...
    same_distance = scheme.bias(torch.tensor([10.0]), torch.tensor([6.0])).detach()[:, 0, 0]
    torch.testing.assert_close(b[:, 2, 1], same_distance, **F64)
    # ... and beyond L it does not: distance 20 seen from 40 and from 80 differ
    d20_from_40 = scheme.bias(torch.tensor([40.0]), torch.tensor([20.0])).detach()
    d20_from_80 = scheme.bias(torch.tensor([80.0]), torch.tensor([60.0])).detach()
    assert (d20_from_40 - d20_from_80).abs().max() > 1e-4


def value_and_grads(scheme, fn, pq, pk, seed=1):
    scheme.zero_grad()
    b = fn(pq, pk)
    G = torch.randn(b.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    (b * G).sum().backward()
    return b.detach(), {n: p.grad.clone() for n, p in scheme.named_parameters()}


def check_against_reference(scheme, pq, pk):
    b, g = value_and_grads(scheme, scheme.bias, pq, pk)
    rb, rg = value_and_grads(scheme, scheme._reference_bias, pq, pk)
    assert b.shape == rb.shape
    torch.testing.assert_close(b, rb, **F64)
    for n in rg:
        torch.testing.assert_close(g[n], rg[n], **F64, msg=lambda m: f"grad {n}: {m}")
    return g


# (T, query rows start, end): all rows, a chunk, a single row (end None = T); odd T
SHAPES = [(1, 0, None), (63, 0, None), (63, 5, 17), (63, 20, 21), (111, 0, None), (111, 40, 97)]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("L", [512.0, 30.0, 0.45])    # all rows within L / some beyond / all
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("T,start,end", SHAPES)
def test_fast_path_matches_pairwise_values_and_grads(T, start, end, kind, L, causal):
    scheme = make(causal, L=L)
    pos = make_pos(kind, T)
    pq = pos[start:end or T]
    g = check_against_reference(scheme, pq, pos)
    if T > 1:
        assert g["w2"].abs().sum() > 0 and g["log_c"] != 0
        # L gets a gradient exactly when some row is normalised by it
        assert (g["log_L"] != 0) == bool((pq <= L).any())


@pytest.mark.parametrize("L", [512.0, 30.0])
@pytest.mark.parametrize("T", [1, 63])
def test_per_sequence_positions(T, L):
    scheme = make(L=L)
    rows = [make_pos("randomized", T, seed=s) for s in range(3)]
    pos = torch.stack(rows)                                                    # [B, T]
    check_against_reference(scheme, pos, pos)
    check_against_reference(scheme, pos[:, 2:], pos)
    check_against_reference(scheme, torch.stack([r * 0.37 for r in rows]), torch.stack(rows) * 0.37)
    b = scheme.bias(pos, pos).detach()
    assert b.shape == (3, H, T, T)
    for i, row in enumerate(rows):                       # each row is its own shared-position bias
        torch.testing.assert_close(b[i], scheme.bias(row, row).detach(), **F64)
    # equal rows give exactly the [T] result
    same = make_pos("identity", T).expand(4, T)
    assert torch.equal(scheme.bias(same, same), scheme.bias(same[0], same[0]).expand(4, -1, -1, -1))


def test_paths_taken(monkeypatch):
    seen = []
    orig_toeplitz = fire_module.toeplitz
    monkeypatch.setattr(fire_module, "toeplitz",
                        lambda *a: seen.append("toeplitz") or orig_toeplitz(*a))
    orig_table = FIRE._distance_table_bias

    def table(self, *a):
        out = orig_table(self, *a)
        seen.append("table" if out is not None else "table refused")
        return out

    monkeypatch.setattr(FIRE, "_distance_table_bias", table)
    monkeypatch.setattr(FIRE, "mlp", lambda *a: pytest.fail("layer-by-layer MLP used"))
    scheme = make(L=40.0)
    for kind, T in [("identity", 30), ("identity", 60), ("randomized", 30), ("fractional", 30)]:
        pos = make_pos(kind, T)
        scheme.bias(pos, pos)
    # identity within L: Toeplitz; identity past L: table (+ pairs beyond L); randomized: table
    # (rows within L) + pairs; fractional: pairs only
    assert seen == ["toeplitz", "table", "table"]
    # distances spread wider than there are pairs: pairwise (the table is refused)
    scheme.bias(torch.tensor([0.0, 1000.0, 3.0]), torch.tensor([0.0, 1000.0, 3.0]))
    assert seen == ["toeplitz", "table", "table", "table refused"]
    monkeypatch.undo()
    pos = torch.tensor([0.0, 1000.0, 3.0])
    torch.testing.assert_close(make(L=2000.0).bias(pos, pos),
                               make(L=2000.0)._reference_bias(pos, pos), **F64)


def test_piecewise_linear_mlp_equals_the_layers_even_on_kinks():
    scheme = make(hidden=6)
    with torch.no_grad():
        scheme.w1.copy_(torch.tensor([1.0, -2.0, 0.0, 0.0, 3.0, -1.0]))
        # kinks 0, 0.25, none, none, 0.5, 0 (a repeated kink, units that never / always fire)
        scheme.b1.copy_(torch.tensor([0.0, 0.5, 0.7, -0.2, -1.5, 0.0]))
    kinks = [0.0, 0.25, 0.5]
    x = torch.cat([torch.linspace(-2, 2, 101, dtype=torch.float64),
                   torch.tensor(kinks, dtype=torch.float64)]).requires_grad_(True)
    G = torch.randn(H, x.numel(), dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    res = {}
    for name in ("mlp", "mlp_pwl"):
        scheme.zero_grad()
        x.grad = None
        y = getattr(scheme, name)(x)
        (y * G).sum().backward()
        res[name] = [y.detach(), x.grad.clone()] + [p.grad.clone() for p in
                                                    (scheme.w1, scheme.b1, scheme.w2, scheme.b2)]
    for a, b in zip(res["mlp_pwl"], res["mlp"]):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("chunk_elements", [1, 7 * H, 100 * H])
def test_chunked_piecewise_evaluation(monkeypatch, chunk_elements):
    """The CPU evaluation walks the pairs in chunks; several chunks and a partial last one."""
    monkeypatch.setattr(fire_module, "PWL_CHUNK_ELEMENTS", chunk_elements)
    scheme = make(L=30.0)
    pos = make_pos("randomized", 41)
    check_against_reference(scheme, pos, pos)
    check_against_reference(scheme, pos[3:11], pos)


def test_bidirectional_tells_left_from_right():
    pos = make_pos("identity", 9)
    b = make(causal=False).bias(pos, pos).detach()
    assert (b[:, 4, 2] - b[:, 4, 6]).abs().max() > 1e-3      # distance 2 left vs right


@pytest.mark.parametrize("kwargs,key", [
    (dict(c_init=0.0), "c_init"), (dict(c_init=-0.1), "c_init"), (dict(c_init="a"), "c_init"),
    (dict(L_init=0), "L_init"), (dict(L_init=-5.0), "L_init"),
    (dict(L_init=float("nan")), "L_init"),
    (dict(hidden=0), "hidden"), (dict(hidden=-3), "hidden"), (dict(hidden=2.5), "hidden"),
    (dict(hidden=True), "hidden"),
])
def test_bad_kwargs_name_the_key_and_the_fix(kwargs, key):
    with pytest.raises(ValueError, match=rf"fire: posenc_kwargs\.{key} .*use e\.g\. {key}="):
        FIRE(d_model=8, n_heads=2, head_dim=4, **kwargs)
    with pytest.raises(ValueError, match=rf"posenc_kwargs\.{key}"):
        Transformer(ModelConfig(vocab_size=5, d_model=8, n_heads=2, n_layers=1, posenc="fire",
                                posenc_kwargs=kwargs))


def test_initial_values():
    scheme = FIRE(d_model=8, n_heads=2, head_dim=4)
    c, L = scheme.c_and_L()
    assert c.item() == pytest.approx(0.1) and L.item() == pytest.approx(512.0)
    assert scheme.hidden == 32 and scheme.w2.shape == (2, 32)
    assert scheme.w1.abs().max() <= 1 and scheme.w2.abs().max() <= 32 ** -0.5
    # the model's generic N(0, 0.02) init leaves FIRE's own init alone
    model = Transformer(ModelConfig(vocab_size=5, d_model=16, n_heads=2, n_layers=1, posenc="fire"))
    assert model.posenc.w1.abs().max() > 0.1


def test_half_precision_parameters_compute_in_fp32():
    scheme = make().float()
    pos = make_pos("randomized", 40)
    want = scheme.bias(pos, pos).detach()
    got = scheme.to(torch.bfloat16).bias(pos, pos)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, atol=0.05, rtol=0.05)


# ---- sharing across layers ------------------------------------------------------------------
def fire_model(per_layer, n_layers=3, seed=0):
    torch.manual_seed(seed)
    kw = {"per_layer": True} if per_layer else {}
    return Transformer(ModelConfig(vocab_size=5, d_model=16, n_layers=n_layers, n_heads=2,
                                   posenc="fire", posenc_kwargs=kw))


def test_shared_by_default():
    model = fire_model(False)
    assert model.layer_posencs is None
    assert all(pe is model.posenc for pe in model.block_posencs())
    n_fire = sum(p.numel() for p in model.posenc.parameters())
    assert n_fire == 32 + 32 + 2 * 32 + 2 + 2


def test_per_layer_schemes_differ_and_train_independently():
    model = fire_model(True)
    schemes = model.block_posencs()
    assert len(schemes) == 3 and len({id(s) for s in schemes}) == 3 and schemes[0] is model.posenc
    assert not torch.equal(schemes[0].w1, schemes[1].w1)
    assert model.num_params() == fire_model(False).num_params() + 2 * (32 + 32 + 64 + 2 + 2)
    tokens = torch.randint(0, 5, (2, 12), generator=torch.Generator().manual_seed(0))
    # a loss that reads only the first block reaches only the first block's scheme
    h = model.embed(tokens)
    pos = model.sample_positions(12)
    model.blocks[0](h, pos, schemes[0]).sum().backward()
    assert schemes[0].w2.grad.abs().sum() > 0
    assert all(p.grad is None for s in schemes[1:] for p in s.parameters())
    # the full loss reaches every scheme, each with its own gradient; one step moves each
    model.zero_grad()
    model(tokens).logsumexp(-1).sum().backward()
    grads = [s.w2.grad.clone() for s in schemes]
    assert all(g.abs().sum() > 0 for g in grads) and not torch.allclose(grads[1], grads[2])
    before = [s.w2.detach().clone() for s in schemes]
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    for s, b, g in zip(schemes, before, grads):
        torch.testing.assert_close(s.w2.detach(), b - 0.1 * g)
    # state dict round trip keeps the per-layer schemes apart
    clone = fire_model(True, seed=1)
    clone.load_state_dict(model.state_dict())
    assert torch.equal(clone.layer_posencs[1].w1, schemes[2].w1)


def test_per_layer_needs_a_scheme_with_learned_bias():
    for bad in ("rope", "alibi", "nope"):
        with pytest.raises(ValueError, match="posenc_kwargs.per_layer"):
            Transformer(ModelConfig(vocab_size=5, d_model=16, n_heads=2, n_layers=2, posenc=bad,
                                    posenc_kwargs={"per_layer": True}))
    with pytest.raises(ValueError, match="per_layer must be true or false"):
        fire_model(True).posenc.__class__(d_model=8, n_heads=2, head_dim=4, per_layer="yes")


@pytest.mark.parametrize("sampler", list(SAMPLERS))
@pytest.mark.parametrize("causal", [True, False])
def test_model_runs_with_every_sampler(sampler, causal):
    torch.manual_seed(0)
    kw = sampler_test_kwargs(sampler)
    model = Transformer(ModelConfig(vocab_size=5, d_model=16, n_layers=2, n_heads=2, posenc="fire",
                                    positions=sampler, positions_kwargs=kw, causal=causal,
                                    posenc_kwargs={"L_init": 16.0}))   # rows beyond L as well
    tokens = torch.randint(0, 5, (2, 20))
    for mode in (True, False):
        model.train(mode)
        out = model(tokens)
        assert out.shape == (2, 20, 5) and torch.isfinite(out).all()
    model.train()
    model(tokens).sum().backward()
    assert model.posenc.w2.grad.abs().sum() > 0 and model.posenc.log_c.grad != 0
