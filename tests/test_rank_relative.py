"""The public code's randomized relative / ALiBi variant (issue: reference initialisation and
variants): ``relative='rank'`` scores the pair at index distance i - j with sign(i-j) d_|i-j|, the
sorted positions' offsets, instead of the positions' difference; the randomized sampler's
``zero_first`` draws exactly the reference distribution of sorted distances."""
from __future__ import annotations

import pytest
import torch

import lengen
from lengen.posenc import build_posenc
from lengen.posenc.distance import rank_relative
from lengen.samplers import build_sampler


def loop_rank(p, Tq_idx):
    out = torch.empty(len(Tq_idx), len(p), dtype=torch.float64)
    for a, i in enumerate(Tq_idx):
        for j in range(len(p)):
            s = (i > j) - (i < j)
            out[a, j] = s * (float(p[abs(i - j)]) - float(p[0]))
    return out


def test_rank_relative_against_a_loop():
    g = torch.Generator().manual_seed(0)
    p = torch.randperm(50, generator=g)[:11].sort().values.float()
    assert torch.equal(rank_relative(p, p), loop_rank(p, range(11)))
    assert torch.equal(rank_relative(p[4:7], p), loop_rank(p, range(4, 7)))       # query block
    batch = torch.stack([p, p + 3, torch.arange(11.0)])                         # [B, T]
    got = rank_relative(batch[:, 2:5], batch)
    for b in range(3):
        assert torch.equal(got[b], loop_rank(batch[b], range(2, 5)))
    ident = torch.arange(9.0)
    assert torch.equal(rank_relative(ident, ident), ident[:, None] - ident[None, :])
    with pytest.raises(ValueError, match="strictly increasing"):
        rank_relative(p.flip(0), p.flip(0))
    with pytest.raises(ValueError, match="among the key positions"):
        rank_relative(p[:3] + 0.5, p)


def test_zero_first_sampler_draws_sorted_distances():
    s = build_sampler("randomized", max_length=40, zero_first=True)
    g = torch.Generator().manual_seed(1)
    seen = set()
    for _ in range(200):
        p = s.sample(12, training=True, generator=g)
        assert p[0] == 0 and bool((p[1:] >= 1).all()) and bool((p[1:] <= 39).all())
        assert bool((p[1:] > p[:-1]).all())
        seen.update(p[1:].tolist())
    assert seen == set(float(v) for v in range(1, 40))       # every distance 1..L-1 occurs


@pytest.mark.parametrize("name", ["xl", "alibi"])
def test_rank_equals_difference_for_identity_positions(name):
    kw = dict(d_model=16, n_heads=2, head_dim=8, causal=False)
    torch.manual_seed(0)
    a = build_posenc(name, relative="difference", **kw)
    torch.manual_seed(0)
    b = build_posenc(name, relative="rank", **kw)
    pos = torch.arange(13.0)
    q, k = torch.randn(2, 2, 13, 8), torch.randn(2, 2, 13, 8)
    assert torch.allclose(a.bias(pos[3:9], pos, q[:, :, 3:9], k),
                          b.bias(pos[3:9], pos, q[:, :, 3:9], k), atol=1e-5)


def test_xl_rank_against_the_definition():
    torch.manual_seed(0)
    xl = build_posenc("xl", d_model=16, n_heads=2, head_dim=8, causal=False, relative="rank")
    p = torch.tensor([0.0, 3, 4, 9, 15, 16, 30])
    q, k = torch.randn(1, 2, 7, 8), torch.randn(1, 2, 7, 8)
    got = xl.bias(p, p, q, k)
    rel = loop_rank(p, range(7))
    scale = 8 ** -0.5
    R = xl.sinusoid(rel, torch.float64).float()                          # [7, 7, d_rel]
    Wr = (R @ xl.w_r.weight.t()).view(7, 7, 2, 8)                        # [i, j, H, hd]
    want = torch.empty(1, 2, 7, 7)
    for h in range(2):
        for i in range(7):
            for j in range(7):
                want[0, h, i, j] = scale * ((q[0, h, i] + xl.v[h]) @ Wr[i, j, h]
                                            + xl.u[h] @ k[0, h, j])
    assert torch.allclose(got, want, atol=1e-5)


def test_rank_variant_through_encoder_and_decoder_models():
    """An encoder with randomized zero-first positions trains a step (blocked eval path too); a
    causal model's cached decoding equals recomputation with rank distances."""
    cfg = lengen.ModelConfig(vocab_size=7, d_model=16, n_layers=1, n_heads=2, causal=False,
                             posenc="xl", posenc_kwargs={"relative": "rank"},
                             positions="randomized",
                             positions_kwargs={"max_length": 64, "zero_first": True},
                             attn_block_size=4)
    m = lengen.Transformer(cfg)
    tokens = torch.randint(0, 7, (2, 10))
    m(tokens).sum().backward()
    m.eval()
    pos = m.sample_positions(10, generator=torch.Generator().manual_seed(0))
    full = m(tokens, positions=pos)
    m.cfg.attn_impl = "naive"
    for blk in m.blocks:
        blk.attn.impl = "naive"
    assert torch.allclose(full, m(tokens, positions=pos), atol=1e-5)
    dec = lengen.Transformer(lengen.ModelConfig(vocab_size=7, d_model=16, n_layers=1, n_heads=2,
                                                posenc="alibi",
                                                posenc_kwargs={"relative": "rank"})).eval()
    pos = torch.tensor([0.0, 2, 3, 7, 8, 11, 20, 21])
    prompt = torch.randint(0, 7, (1, 4))
    with torch.no_grad():
        cached = dec.generate(prompt, 4, positions=pos)[0]
        recomputed = dec.generate(prompt, 4, positions=pos, use_cache=False)[0]
    assert torch.equal(cached, recomputed)


def test_bad_relative_value():
    with pytest.raises(ValueError, match="relative"):
        lengen.resolve({"model": {"posenc": "xl", "posenc_kwargs": {"relative": "ranks"}}})
