"""Log-length query scaling (``attention_kwargs.logn``, :mod:`lengen.attention.scaling`): Llama 4's
temperature tuning against Hugging Face's Llama4TextAttention (fp64, values and gradients),
SSMax against hand-computed weights, cached decoding == recomputation for every attention kind,
and clear refusals."""
from __future__ import annotations

import math

import pytest
import torch

from lengen.attention import ATTENTIONS, build_attention
from lengen.config import resolve
from lengen.contracts.model import build, generation, paths_agree
from lengen.errors import ConfigError
from lengen.posenc import build_posenc


def _nope(D, H):
    return build_posenc("nope", d_model=D, n_heads=H, head_dim=D // H)


@pytest.mark.parametrize("T", [1, 63, 111])
def test_llama4_temperature_tuning_matches_transformers(T):
    hf = pytest.importorskip("transformers.models.llama4.modeling_llama4")
    from transformers import Llama4TextConfig

    D, H = 16, 2
    cfg = Llama4TextConfig(hidden_size=D, num_attention_heads=H, num_key_value_heads=H,
                           head_dim=D // H, num_hidden_layers=1, no_rope_layers=[0],
                           attn_temperature_tuning=True, floor_scale=4, attn_scale=0.3,
                           use_qk_norm=False, attention_dropout=0.0)
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    ref = hf.Llama4TextAttention(cfg, layer_idx=0).double()
    assert not ref.use_rope                          # layer 0 is a NoPE layer: tuning applies
    ours = build_attention("softmax", d_model=D, n_heads=H, impl="naive", logn="llama4",
                           logn_floor_scale=4, logn_attn_scale=0.3).double()
    with torch.no_grad():
        ours.qkv.weight.copy_(torch.cat([ref.q_proj.weight, ref.k_proj.weight,
                                         ref.v_proj.weight]))
        ours.proj.weight.copy_(ref.o_proj.weight)
    x = torch.randn(2, T, D, dtype=torch.float64) * 3
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    mask = torch.full((T, T), float("-inf"), dtype=torch.float64).triu(1)[None, None]
    y_ref, _ = ref(x1, None, mask)
    y = ours(x2, torch.arange(T, dtype=torch.float64), _nope(D, H))
    # HF computes the factor from float32 positions (``positions.float()``), so it carries
    # float32 rounding (~1e-7 relative) into an otherwise float64 computation
    torch.testing.assert_close(y, y_ref, atol=1e-6, rtol=1e-6)
    g = torch.randn_like(y)
    (y_ref * g).sum().backward()
    (y * g).sum().backward()
    torch.testing.assert_close(x2.grad, x1.grad, atol=1e-6, rtol=1e-6)
    # the factor is not the identity over these rows (else the test proves nothing)
    if T > 3:
        ours_off = build_attention("softmax", d_model=D, n_heads=H, impl="naive").double()
        ours_off.load_state_dict(ours.state_dict(), strict=False)
        y_off = ours_off(x, torch.arange(T, dtype=torch.float64), _nope(D, H))
        assert (y_off - y).abs().max() > 1e-3


def test_ssmax_hand_values():
    """One head, keys 0 and 1 seen by query 1 (n = 2): weights softmax(s log 2 * z)."""
    D, H = 2, 1
    attn = build_attention("softmax", d_model=D, n_heads=H, impl="naive", logn="ssmax",
                           logn_s=0.7).double()
    with torch.no_grad():                           # q = x, k = x, v = x
        attn.qkv.weight.copy_(torch.cat([torch.eye(2)] * 3))
        attn.proj.weight.copy_(torch.eye(2))
    x = torch.tensor([[[1.0, 0.0], [2.0, 1.0]]], dtype=torch.float64)
    y = attn(x, torch.arange(2.0, dtype=torch.float64), _nope(D, H))
    z = torch.tensor([2.0, 5.0]) / math.sqrt(2)      # q_1.k_0, q_1.k_1 over sqrt(d)
    w = torch.softmax(0.7 * math.log(2) * z, 0)
    expect1 = w[0] * torch.tensor([1.0, 0.0]) + w[1] * torch.tensor([2.0, 1.0])
    torch.testing.assert_close(y[0, 1].float(), expect1, atol=1e-6, rtol=0)
    torch.testing.assert_close(y[0, 0].float(), torch.tensor([1.0, 0.0]))   # one key: itself
    # an encoder's rows all see n = T keys
    enc = build_attention("softmax", d_model=D, n_heads=H, impl="naive", causal=False,
                          logn="ssmax", logn_s=0.7).double()
    enc.load_state_dict(attn.state_dict())
    y = enc(x, torch.arange(2.0, dtype=torch.float64), _nope(D, H))
    z0 = torch.tensor([1.0, 2.0]) / math.sqrt(2)
    w0 = torch.softmax(0.7 * math.log(2) * z0, 0)
    torch.testing.assert_close(y[0, 0].float(), w0[0] * torch.tensor([1.0, 0.0])
                               + w0[1] * torch.tensor([2.0, 1.0]), atol=1e-6, rtol=0)


def test_ssmax_s_is_learned_per_head():
    attn = build_attention("softmax", d_model=8, n_heads=2, logn="ssmax")
    assert attn.logn.s.shape == (2,) and attn.logn.s.requires_grad
    fixed = build_attention("softmax", d_model=8, n_heads=2, logn="ssmax", logn_learn_s=False)
    assert not any("logn" in n for n, _ in fixed.named_parameters())


#: the attention kinds (log-length scaling acts on q, which a token mixer does not have)
KINDS = sorted(n for n, c in ATTENTIONS.items() if not c.is_token_mixer)


@pytest.mark.parametrize("logn", ["ssmax", "llama4"])
@pytest.mark.parametrize("attention", KINDS)
def test_cached_decoding_equals_recomputation(attention, logn):
    kw = {"logn": logn, "logn_floor_scale": 2.0} if logn == "llama4" else {"logn": logn}
    generation(posenc="rope", attention=attention, attention_kwargs=kw)
    paths_agree(posenc="nope", attention=attention, attention_kwargs=kw)


def test_scaling_changes_outputs_for_every_kind():
    tokens = torch.randint(0, 7, (2, 12), generator=torch.Generator().manual_seed(0))
    for attention in KINDS:
        a = build(attention=attention).eval()
        b = build(attention=attention, attention_kwargs={"logn": "llama4",
                                                         "logn_floor_scale": 1.0}).eval()
        b.load_state_dict(a.state_dict())
        with torch.no_grad():
            assert (a(tokens) - b(tokens)).abs().max() > 1e-4, attention


def test_refusals():
    with pytest.raises(ConfigError, match="logn"):
        resolve({"model": {"attention_kwargs": {"logn": "log"}}, "task": {"name": "copy"}})
    with pytest.raises(ValueError, match="decoders"):
        build_attention("softmax", d_model=8, n_heads=2, causal=False, logn="llama4")
