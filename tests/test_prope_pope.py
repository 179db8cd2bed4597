"""p-RoPE (``prope``) against Hugging Face's ``proportional`` RoPE (the same operator: Gemma's
``rope_proportion``) and its limits (p = 1 is ``rope``, p = 0 is NoPE, and it is not ``rope``'s
``rotary_fraction``); PoPE (``pope``) against x-transformers' ``PolarEmbedding`` /
``apply_polar_pos_emb`` (values and gradients), its score formula by hand, and the refusal of
kinds that need head-wide q/k."""
from __future__ import annotations

import math

import pytest
import torch

from lengen.config import resolve
from lengen.errors import ConfigError
from lengen.posenc import build_posenc

HD, H = 16, 2


def _scheme(name, **kw):
    return build_posenc(name, d_model=HD * H, n_heads=H, head_dim=HD, **kw)


def _qk(T, B=2, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(B, H, T, HD, generator=g, dtype=dtype),
            torch.randn(B, H, T, HD, generator=g, dtype=dtype))


# -- p-RoPE ------------------------------------------------------------------------------------

@pytest.mark.parametrize("p", [0.25, 0.5, 0.75, 1.0])
def test_prope_matches_transformers_proportional_rope(p):
    rope_utils = pytest.importorskip("transformers.modeling_rope_utils")
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    cfg = LlamaConfig(hidden_size=HD * H, num_attention_heads=H, head_dim=HD,
                      rope_parameters={"rope_type": "proportional", "rope_theta": 500.0,
                                       "partial_rotary_factor": p})
    inv, factor = rope_utils.ROPE_INIT_FUNCTIONS["proportional"](cfg, "cpu")
    assert factor == 1.0
    ours = _scheme("prope", p=p, base=500.0)
    # 1 / base^x there, base^-x here (as rope's): float32 rounding apart
    torch.testing.assert_close(ours.inv_freq, inv.float(), rtol=1e-6, atol=0)
    T = 37
    pos = torch.arange(T, dtype=torch.float64) * 1.5
    freqs = pos[:, None].float() * inv.float()[None]
    emb = torch.cat([freqs, freqs], -1)
    q, k = _qk(T)
    rq, rk = apply_rotary_pos_emb(q, k, emb.cos().double()[None], emb.sin().double()[None])
    oq, ok = ours.rotate(q, k, pos)
    torch.testing.assert_close(oq, rq, rtol=0, atol=1e-5)
    torch.testing.assert_close(ok, rk, rtol=0, atol=1e-5)


def test_prope_limits_and_difference_from_rotary_fraction():
    q, k = _qk(23)
    pos = torch.arange(23, dtype=torch.float64)
    rope = _scheme("rope")
    for a, b in zip(_scheme("prope", p=1.0).rotate(q, k, pos), rope.rotate(q, k, pos)):
        assert torch.equal(a, b)                                  # p = 1: RoPE, bit for bit
    for a, b in zip(_scheme("prope", p=0.0).rotate(q, k, pos), (q, k)):
        assert torch.equal(a, b)                                  # p = 0: NoPE
    pr = _scheme("prope", p=0.5)
    assert pr.kept == 4
    # the kept frequencies are RoPE's highest four, unchanged; the lowest four are 0
    torch.testing.assert_close(pr.inv_freq[:4], rope.inv_freq[:4], rtol=0, atol=0)
    assert torch.equal(pr.inv_freq[4:], torch.zeros(4))
    frac = _scheme("rope", rotary_fraction=0.5)                   # re-spread frequencies
    assert not torch.allclose(frac.inv_freq, pr.inv_freq[:4])
    assert not torch.allclose(frac.rotate(q, k, pos)[0], pr.rotate(q, k, pos)[0])
    # channels of dropped frequencies (pairs 4..7: channels 4..7 and 12..15) pass unrotated
    oq, _ = pr.rotate(q, k, pos)
    keep = [4, 5, 6, 7, 12, 13, 14, 15]
    assert torch.equal(oq[..., keep], q[..., keep])
    assert not torch.allclose(oq[..., :4], q[..., :4])


def test_prope_refuses_bad_p():
    with pytest.raises(ConfigError, match="posenc_kwargs.p"):
        resolve({"model": {"posenc": "prope", "posenc_kwargs": {"p": 1.5}},
                 "task": {"name": "copy"}})


# -- PoPE --------------------------------------------------------------------------------------

def _xt():
    xt = pytest.importorskip("x_transformers.x_transformers")
    return xt.PolarEmbedding, xt.apply_polar_pos_emb


@pytest.mark.parametrize("T", [1, 63, 111])
@pytest.mark.parametrize("per_sequence", [False, True])
def test_pope_matches_x_transformers(T, per_sequence):
    PolarEmbedding, apply_polar = _xt()
    torch.manual_seed(0)
    ref = PolarEmbedding(HD, H)    # (its bias_uniform_init fills a leaf in place: an error)
    ours = _scheme("pope", bias_uniform_init=True)                 # U(-2 pi, 0)
    with torch.no_grad():
        ref.learned_bias.copy_(ours.phase[:, None])                # [H, hd] -> [H, 1, hd]
        ours.phase[0, 0] = ref.learned_bias[0, 0, 0] = -7.0        # clamped to -2 pi by both
    pos = torch.arange(T, dtype=torch.float32)
    freqs, bias = ref(pos)
    # x-transformers computes in float32: float32 inputs, float32 tolerances
    q, k = (t.float().requires_grad_() for t in _qk(T))
    q2, k2 = (t.detach().clone().requires_grad_() for t in (q, k))
    rq = apply_polar(q, freqs)
    rk = apply_polar(k, freqs + bias)
    opos = pos.expand(2, T) if per_sequence else pos
    oq, ok = ours.rotate(q2, k2, opos)
    # ours carries sqrt(2) on q so that the ops' 1/sqrt(2 hd) scale becomes x-transformers'
    # 1/sqrt(hd): the scaled scores are equal
    s_ref = rq @ rk.transpose(-1, -2) * HD ** -0.5
    s_ours = oq @ ok.transpose(-1, -2) * (2 * HD) ** -0.5
    torch.testing.assert_close(s_ours, s_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ok, rk, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(oq / math.sqrt(2), rq, rtol=1e-6, atol=1e-6)
    g = torch.randn_like(s_ref)
    (s_ref * g).sum().backward()
    (s_ours * g).sum().backward()
    torch.testing.assert_close(q2.grad, q.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(k2.grad, k.grad, rtol=1e-4, atol=1e-5)
    assert ours.phase.grad is not None and ours.phase.grad[0, 0] == 0   # clamped: no gradient


def test_pope_score_by_hand():
    """sum_c softplus(q_c) softplus(k_c) cos((i - j) theta_c - delta_c) / sqrt(hd), fp64."""
    pe = _scheme("pope")
    with torch.no_grad():
        pe.phase.copy_(-torch.rand(H, HD, dtype=torch.float64) * 6)
    q, k = _qk(5)
    pos = torch.tensor([0.0, 1.0, 2.5, 4.0, 7.0], dtype=torch.float64)
    oq, ok = pe.rotate(q, k, pos)
    assert oq.shape == (2, H, 5, 2 * HD) and oq.dtype == torch.float64
    score = (oq @ ok.transpose(-1, -2)) / math.sqrt(2 * HD)
    theta = 10000.0 ** (-torch.arange(HD, dtype=torch.float64) / HD)
    sp = torch.nn.functional.softplus
    b, h, i, j = 1, 1, 3, 1
    want = (sp(q[b, h, i]) * sp(k[b, h, j])
            * torch.cos((pos[i] - pos[j]) * theta - pe.phase[h].double())).sum() / math.sqrt(HD)
    torch.testing.assert_close(score[b, h, i, j], want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("attention", ["cope", "diff"])
def test_pope_refuses_kinds_that_need_head_wide_qk(attention):
    with pytest.raises(ConfigError, match="2x as wide"):
        resolve({"model": {"posenc": "pope", "attention": attention},
                 "task": {"name": "copy"}})
