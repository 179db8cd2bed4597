"""Positional schemes: the defining property of each hook, checked against hand-derived values."""
from __future__ import annotations

import math

import pytest
import torch

from lengen.model import ModelConfig, Transformer
from lengen.posenc import ALiBi, LearnedAbsolute, NoPE, RoPE, SinCos, T5Bias
from lengen.posenc.alibi import alibi_slopes


def dims(d_model=16, n_heads=2, causal=True):
    return dict(d_model=d_model, n_heads=n_heads, head_dim=d_model // n_heads, causal=causal)


# ---- RoPE ------------------------------------------------------------------------------------
def rope_score(rope, qv, kv, pos_q, pos_k):
    """q . k after rotating q at position pos_q and k at pos_k. qv, kv: [hd]."""
    q = torch.stack([qv, torch.zeros_like(qv)]).view(1, 1, 2, -1)   # row 0 is the query
    k = torch.stack([torch.zeros_like(kv), kv]).view(1, 1, 2, -1)   # row 1 is the key
    qr, kr = rope.rotate(q, k, torch.tensor([pos_q, pos_k], dtype=torch.float32))
    return float(qr[0, 0, 0] @ kr[0, 0, 1])


@pytest.mark.parametrize("shift", [1.0, 7.0, 0.5, 3.25, 100.7])
def test_rope_score_depends_only_on_relative_position(shift):
    rope = RoPE(**dims())
    g = torch.Generator().manual_seed(0)
    qv, kv = torch.randn(8, generator=g), torch.randn(8, generator=g)
    for pq, pk in [(5.0, 2.0), (3.0, 3.0), (10.5, 0.25), (2.0, 9.0)]:
        base = rope_score(rope, qv, kv, pq, pk)
        moved = rope_score(rope, qv, kv, pq + shift, pk + shift)
        assert moved == pytest.approx(base, abs=2e-4), (pq, pk, shift)
    # ...and it does depend on the relative position (the check above is not vacuous)
    assert abs(rope_score(rope, qv, kv, 5.0, 2.0) - rope_score(rope, qv, kv, 5.0, 3.0)) > 1e-2


def test_rope_is_identity_at_zero_and_norm_preserving():
    rope = RoPE(**dims())
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(2, 2, 5, 8, generator=g), torch.randn(2, 2, 5, 8, generator=g)
    pos = torch.tensor([0.0, 1.0, 2.5, 40.0, 1000.0])
    qr, kr = rope.rotate(q, k, pos)
    torch.testing.assert_close(qr[:, :, 0], q[:, :, 0])
    torch.testing.assert_close(qr.norm(dim=-1), q.norm(dim=-1))
    torch.testing.assert_close(kr.norm(dim=-1), k.norm(dim=-1))
    assert not torch.allclose(qr[:, :, 1:], q[:, :, 1:], atol=1e-3)


def test_rope_odd_head_dim_raises():
    with pytest.raises(ValueError, match="even head dim"):
        RoPE(**dims(d_model=6, n_heads=2))            # head_dim 3
    with pytest.raises(ValueError, match="even head dim"):
        Transformer(ModelConfig(vocab_size=5, d_model=6, n_heads=2, n_layers=1, posenc="rope"))


# ---- ALiBi -----------------------------------------------------------------------------------
def test_alibi_slopes_power_of_two():
    torch.testing.assert_close(alibi_slopes(8), torch.tensor([2.0 ** -h for h in range(1, 9)]))
    torch.testing.assert_close(alibi_slopes(4), torch.tensor([2.0 ** -(2 * h) for h in range(1, 5)]))


def test_alibi_slopes_non_power_of_two_follow_press_et_al():
    # Press et al.: the slopes of the closest lower power of two (here 4: 2^-2, 2^-4, 2^-6, 2^-8),
    # then every other slope of twice that (8: 2^-1, 2^-3, ...) until n heads are filled
    want6 = [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1, 2 ** -3]
    torch.testing.assert_close(alibi_slopes(6), torch.tensor(want6))
    # 12 heads: 8 -> 2^-1..2^-8, then 16 -> 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5
    want12 = [2.0 ** -h for h in range(1, 9)] + [2 ** -0.5, 2 ** -1.5, 2 ** -2.5, 2 ** -3.5]
    torch.testing.assert_close(alibi_slopes(12), torch.tensor(want12))


def test_alibi_bias_is_minus_slope_times_distance():
    alibi = ALiBi(**dims(d_model=16, n_heads=4))
    T = 9
    pos = torch.arange(T, dtype=torch.float32)
    b = alibi.bias(pos, pos)
    assert b.shape == (4, T, T)
    i, j = torch.tril_indices(T, T)
    want = -alibi_slopes(4)[:, None] * (i - j).float()[None]
    torch.testing.assert_close(b[:, i, j], want)


def assert_constant_along_causal_diagonals(b):
    T = b.shape[-1]
    for i in range(T - 1):
        for j in range(i + 1):
            torch.testing.assert_close(b[:, i + 1, j + 1], b[:, i, j], rtol=0, atol=0)


def test_alibi_and_t5_constant_along_diagonals():
    T = 40
    pos = torch.arange(T, dtype=torch.float32)
    alibi = ALiBi(**dims(n_heads=4))
    t5 = T5Bias(num_buckets=8, max_distance=20, **dims(n_heads=4))
    torch.nn.init.normal_(t5.table.weight, generator=torch.Generator().manual_seed(0))
    for scheme in (alibi, t5):
        b = scheme.bias(pos, pos).detach()
        assert_constant_along_causal_diagonals(b)
        assert b[:, 5, 0].ne(b[:, 5, 5]).any()     # but not constant across diagonals
    # shifting every position by the same amount (fractional too) changes nothing
    for scheme in (alibi, t5):
        torch.testing.assert_close(scheme.bias(pos + 13.0, pos + 13.0), scheme.bias(pos, pos))


def test_t5_distances_beyond_max_distance_share_the_last_bucket():
    T, nb, maxd = 300, 32, 128
    t5 = T5Bias(num_buckets=nb, max_distance=maxd, **dims(n_heads=2))
    torch.nn.init.normal_(t5.table.weight, generator=torch.Generator().manual_seed(0))
    pos = torch.arange(T, dtype=torch.float32)
    row = t5.bias(pos[-1:], pos).detach()[:, 0]      # [H, T]: query T-1, distance T-1-j
    dist = (T - 1) - torch.arange(T)
    last = t5.table.weight[nb - 1].detach()          # [H]
    far = row[:, dist >= maxd]
    torch.testing.assert_close(far, last[:, None].expand_as(far), rtol=0, atol=0)
    # small distances have exact buckets 0..nb/2-1 (one-sided, causal)
    for d in range(nb // 2):
        torch.testing.assert_close(row[:, T - 1 - d], t5.table.weight[d].detach(), rtol=0, atol=0)
    # a distance well inside max_distance is not in the last bucket
    assert not torch.equal(row[:, T - 1 - 60], last)


# ---- learned absolute ------------------------------------------------------------------------
def learned_model(max_positions=8):
    cfg = ModelConfig(vocab_size=5, d_model=16, n_layers=1, n_heads=2, posenc="learned",
                      posenc_kwargs={"max_positions": max_positions})
    return Transformer(cfg)


def test_learned_check_length_beyond_table_raises():
    model = learned_model(8)
    model.check_length(8)                            # positions 0..7 fit
    with pytest.raises(ValueError, match=r"8 rows.*max_positions"):
        model.check_length(9)
    with pytest.raises(ValueError, match="beyond learned table"):
        model(torch.zeros(1, 9, dtype=torch.long))
    assert model(torch.zeros(1, 8, dtype=torch.long)).shape == (1, 8, 5)


def test_learned_fractional_positions_interpolate():
    pe = LearnedAbsolute(max_positions=6, **dims(d_model=4, n_heads=1))
    x = torch.zeros(1, 4, 4)
    pos = torch.tensor([0.0, 2.0, 2.25, 4.5])
    out = pe.embed(x, pos)[0].detach()
    t = pe.table.detach()
    torch.testing.assert_close(out[0], t[0])
    torch.testing.assert_close(out[1], t[2])
    torch.testing.assert_close(out[2], 0.75 * t[2] + 0.25 * t[3])
    torch.testing.assert_close(out[3], 0.5 * t[4] + 0.5 * t[5])


# ---- sin/cos ---------------------------------------------------------------------------------
def test_sincos_hand_checked_values():
    pe = SinCos(**dims(d_model=4, n_heads=1))
    # D = 4: frequencies 1 and 10000^(-2/4) = 0.01; layout [sin, cos, sin, cos]
    pos = torch.tensor([0.0, 1.0, 2.5, 100.0])
    out = pe.embed(torch.zeros(1, 4, 4), pos)[0]
    for r, p in enumerate(pos.tolist()):
        want = torch.tensor([math.sin(p), math.cos(p), math.sin(0.01 * p), math.cos(0.01 * p)])
        torch.testing.assert_close(out[r], want, atol=1e-5, rtol=0)
    # the hook adds to the embeddings rather than replacing them
    x = torch.ones(1, 4, 4)
    torch.testing.assert_close(pe.embed(x, pos), out[None] + 1)


def test_nope_hooks_are_identity():
    pe = NoPE(**dims())
    x, q, k = torch.randn(1, 3, 16), torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8)
    pos = torch.arange(3.0)
    assert torch.equal(pe.embed(x, pos), x)
    qr, kr = pe.rotate(q, k, pos)
    assert torch.equal(qr, q) and torch.equal(kr, k)
    assert pe.bias(pos, pos) is None and not pe.has_bias


# ---- per-sequence positions [B, T] -------------------------------------------------------------
def per_row_positions(T=9):
    return torch.stack([torch.arange(T) * 0.5 + 1.0, torch.arange(T) + 4.0,
                        torch.tensor([0.0, 2, 3, 7, 8, 20, 21, 22, 40])[:T]])


@pytest.mark.parametrize("scheme", [SinCos, LearnedAbsolute, NoPE])
def test_embed_per_sequence_rows_equal_each_row_alone(scheme):
    pe = scheme(**dims())
    pos = per_row_positions()
    x = torch.randn(3, 9, 16, generator=torch.Generator().manual_seed(0))
    out = pe.embed(x, pos)
    for r in range(3):
        torch.testing.assert_close(out[r], pe.embed(x[r:r + 1], pos[r])[0], rtol=0, atol=0)


def test_rope_per_sequence_rows_equal_each_row_alone():
    rope = RoPE(**dims())
    pos = per_row_positions()
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(3, 2, 9, 8, generator=g), torch.randn(3, 2, 9, 8, generator=g)
    qr, kr = rope.rotate(q, k, pos)
    for r in range(3):
        qa, ka = rope.rotate(q[r:r + 1], k[r:r + 1], pos[r])
        torch.testing.assert_close(qr[r:r + 1], qa, rtol=0, atol=0)
        torch.testing.assert_close(kr[r:r + 1], ka, rtol=0, atol=0)


@pytest.mark.parametrize("causal,asym", [(True, False), (False, False), (False, True)])
def test_alibi_per_sequence_bias_shapes_and_rows(causal, asym):
    alibi = ALiBi(encoder_asymmetric=asym, **dims(n_heads=4, causal=causal))
    pos = per_row_positions()
    b = alibi.bias(pos, pos)
    assert b.shape == (3, 4, 9, 9)
    assert alibi.bias(pos[0], pos[0]).shape == (4, 9, 9)
    for r in range(3):
        torch.testing.assert_close(b[r], alibi.bias(pos[r], pos[r]), rtol=0, atol=0)
    # a shared query side against per-sequence keys (a decoding step) broadcasts over the batch
    mixed = alibi.bias(pos[0, -2:], pos)
    assert mixed.shape == (3, 4, 2, 9)
    for r in range(3):
        torch.testing.assert_close(mixed[r], alibi.bias(pos[0, -2:], pos[r]), rtol=0, atol=0)
