"""RoPE options: rotary fraction, linear / dynamic NTK / YaRN scaling, each against its formula
written out here with Python floats, pair by pair (no code shared with lengen.posenc)."""
from __future__ import annotations

import math

import pytest
import torch

import lengen
from lengen.errors import ConfigError
from lengen.posenc import RoPE

HD = 16


def rope(**kw):
    return RoPE(d_model=HD * 2, n_heads=2, head_dim=HD, **kw).double()


def manual(x: torch.Tensor, pos, thetas, rot: int, m: float = 1.0) -> torch.Tensor:
    """x [B, H, T, hd] rotated by hand: pair (c, c + rot/2) of the first ``rot`` channels turns
    by pos * thetas[c]; cos and sin carry the factor m; channels >= rot pass through."""
    out = x.clone()
    half = rot // 2
    for t, p in enumerate(pos):
        for c in range(half):
            a = float(p) * thetas[c]
            cs, sn = m * math.cos(a), m * math.sin(a)
            x1, x2 = x[..., t, c], x[..., t, c + half]
            out[..., t, c] = x1 * cs - x2 * sn
            out[..., t, c + half] = x2 * cs + x1 * sn
    return out


def plain_thetas(rot, base=10000.0):
    return [base ** (-2 * i / rot) for i in range(rot // 2)]


def qk(T=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(2, 2, T, HD, generator=g, dtype=torch.float64),
            torch.randn(2, 2, T, HD, generator=g, dtype=torch.float64))


def check(scheme, pos, thetas, rot, m=1.0):
    # angles are float32 in RoPE (pos * theta), hence the tolerance at positions of ~100
    q, k = qk(len(pos))
    rq, rk = scheme.rotate(q, k, torch.tensor(pos, dtype=torch.float64))
    torch.testing.assert_close(rq, manual(q, pos, thetas, rot, m), rtol=1e-5, atol=2e-5)
    torch.testing.assert_close(rk, manual(k, pos, thetas, rot, m), rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("fraction,rot", [(1.0, 16), (0.25, 4), (0.5, 8), (0.3, 4)])
def test_rotary_fraction(fraction, rot):
    s = rope(rotary_fraction=fraction)
    assert s.rot_dim == rot
    check(s, [0, 1, 2.5, 7, 30, 31, 100], plain_thetas(rot), rot)
    # relative: shifting every position leaves q.k unchanged
    q, k = qk(5)
    pos = torch.tensor([0.0, 1, 2, 3, 4], dtype=torch.float64)
    a = torch.einsum("bhid,bhjd->bhij", *s.rotate(q, k, pos))
    b = torch.einsum("bhid,bhjd->bhij", *s.rotate(q, k, pos + 13.5))
    torch.testing.assert_close(a, b)


def test_default_is_the_full_formula_in_float32():
    s = RoPE(d_model=32, n_heads=2, head_dim=HD)
    want = 10000.0 ** (-torch.arange(0, HD, 2, dtype=torch.float32) / HD)
    assert torch.equal(s.inv_freq, want) and s.rot_dim == HD and s.mscale == 1.0


def test_linear_is_positions_over_factor():
    s = rope(scaling="linear", factor=4.0)
    check(s, [0, 1, 5, 9, 40], [t / 4 for t in plain_thetas(HD)], HD)


@pytest.mark.parametrize("T", [20, 21, 64])
def test_dynamic_ntk(T):
    L0, s_, d = 20, 2.0, HD
    s = rope(scaling="dynamic", factor=s_, original_length=L0)
    pos = list(range(T))
    if T <= L0:
        base = 10000.0
    else:
        base = 10000.0 * ((s_ * T / L0) - (s_ - 1)) ** (d / (d - 2))
    check(s, pos, plain_thetas(d, base), d)
    # L is the largest position + 1 over the batch, also for [B, T] and fractional positions
    q, k = qk(3)
    pos2 = torch.tensor([[0.0, 1.0, 2.0], [0.0, 30.0, 40.5]], dtype=torch.float64)
    base2 = 10000.0 * ((s_ * 41.5 / L0) - (s_ - 1)) ** (d / (d - 2))
    rq, _ = s.rotate(q, k, pos2)
    for b in range(2):
        torch.testing.assert_close(rq[b:b + 1], manual(q[b:b + 1], pos2[b].tolist(),
                                                       plain_thetas(d, base2), d),
                                   rtol=1e-6, atol=1e-6)


def yarn_thetas(d, base, factor, L0, beta_fast=32.0, beta_slow=1.0):
    def corr(r):
        return d * math.log(L0 / (r * 2 * math.pi)) / (2 * math.log(base))

    lo, hi = max(math.floor(corr(beta_fast)), 0), min(math.ceil(corr(beta_slow)), d - 1)
    if lo == hi:
        hi += 0.001
    out = []
    for i in range(d // 2):
        theta = base ** (-2 * i / d)
        ramp = min(max((i - lo) / (hi - lo), 0.0), 1.0)
        keep = 1 - ramp
        out.append(theta / factor * (1 - keep) + theta * keep)
    return out


@pytest.mark.parametrize("d,L0,factor", [(16, 64, 4.0), (16, 4096, 8.0), (64, 2048, 16.0)])
def test_yarn_frequencies_and_temperature(d, L0, factor):
    global HD
    old, HD = HD, d
    try:
        s = rope(scaling="yarn", factor=factor, original_length=L0)
        want = yarn_thetas(d, 10000.0, factor, L0)
        torch.testing.assert_close(s.inv_freq.double(), torch.tensor(want, dtype=torch.float64),
                                   rtol=1e-6, atol=0)
        m = 0.1 * math.log(factor) + 1
        assert s.mscale == pytest.approx(m)
        check(s, [0, 1, 3.5, 50], want, d, m)
        # the highest frequency is kept (extrapolated), the lowest interpolated by 1 / factor
        assert want[0] == 1.0 and want[-1] == pytest.approx(10000.0 ** (-(d - 2) / d) / factor)
        # q.k at equal positions is scaled by m^2
        q, k = qk(1)
        rq, rk = s.rotate(q, k, torch.zeros(1, dtype=torch.float64))
        torch.testing.assert_close((rq * rk).sum(-1), m * m * (q * k).sum(-1))
    finally:
        HD = old


def test_yarn_with_a_fraction_scales_only_the_rotated_channels():
    s = rope(scaling="yarn", factor=4.0, original_length=32, rotary_fraction=0.5,
             attention_factor=1.5)
    check(s, [0, 2, 9], yarn_thetas(8, 10000.0, 4.0, 32), 8, 1.5)


def test_per_sequence_positions_equal_rows():
    for kw in ({"rotary_fraction": 0.25}, {"scaling": "yarn", "factor": 4.0,
                                           "original_length": 10},
               {"scaling": "dynamic", "factor": 2.0, "original_length": 4}):
        s = rope(**kw)
        q, k = qk(6)
        pos = torch.arange(6, dtype=torch.float64) * 0.75
        a = s.rotate(q, k, pos)
        b = s.rotate(q, k, pos.expand(2, 6))
        torch.testing.assert_close(a[0], b[0])
        torch.testing.assert_close(a[1], b[1])


def test_config_fills_the_original_length_and_models_run():
    cfg = lengen.resolve({"model": {"posenc": "rope", "posenc_kwargs": {"scaling": "yarn",
                                                                         "factor": 4.0}},
                          "task": {"name": "copy", "kwargs": {"max_train_length": 6}}}).config
    assert cfg.model.posenc_kwargs["original_length"] == 14
    torch.manual_seed(0)
    for kw in ({"rotary_fraction": 0.25}, {"scaling": "dynamic", "factor": 2.0,
                                           "original_length": 8},
               {"scaling": "linear", "factor": 2.0}):
        m = lengen.Transformer(lengen.ModelConfig(vocab_size=7, d_model=32, n_heads=2,
                                                  n_layers=2, posenc="rope", posenc_kwargs=kw))
        x = torch.randint(0, 7, (2, 6))
        m.eval()
        # cached decoding within L0 equals recomputation (dynamic NTK is then the plain RoPE)
        a = m.generate(x, max_new_tokens=2, use_cache=True)
        b = m.generate(x, max_new_tokens=2, use_cache=False)
        assert [t.tolist() for t in a] == [t.tolist() for t in b]


@pytest.mark.parametrize("kw,match", [
    ({"scaling": "ntk"}, "unknown posenc_kwargs.scaling"),
    ({"factor": 2.0}, "needs a scaling"),
    ({"scaling": "dynamic", "factor": 2.0}, "original_length"),
    ({"scaling": "yarn", "factor": 2.0, "original_length": 8, "beta_fast": 1.0}, "beta_fast"),
    ({"rotary_fraction": 0.05}, "rotary_fraction"),
    ({"rotary_fraction": 1.5}, "rotary_fraction"),
    ({"attention_factor": 1.2}, "attention_factor=1.2 needs a scaling.*yarn, longrope"),
    ({"scaling": "linear", "factor": 0.5}, "factor must be >= 1"),
])
def test_bad_rope_options(kw, match):
    with pytest.raises(ValueError, match=match):
        rope(**kw)


def test_bad_rope_options_through_the_config():
    with pytest.raises(ConfigError, match="model.posenc_kwargs.rotary_fraction"):
        lengen.resolve({"model": {"posenc": "rope", "posenc_kwargs": {"rotary_fraction": 0}}})
    with pytest.raises(ConfigError, match="scaling"):
        lengen.resolve({"model": {"posenc": "rope", "posenc_kwargs": {"scaling": "ntk"}}})
