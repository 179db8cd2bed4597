"""RoPE scalings against Hugging Face ``transformers``' own RoPE initialisation
(``modeling_rope_utils.ROPE_INIT_FUNCTIONS``: inverse frequencies and attention factor) and its
``LlamaRotaryEmbedding`` (cos / sin at given positions, which also picks LongRoPE's short or long
factors and dynamic NTK's base from the call's positions). Configs are built here; no hub access."""
from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding  # noqa: E402

import lengen  # noqa: E402
from lengen.errors import ConfigError  # noqa: E402
from lengen.posenc import RoPE  # noqa: E402

HD, L0 = 16, 64
g = torch.Generator().manual_seed(0)
SHORT = (1 + torch.rand(HD // 2, generator=g)).tolist()
LONG = (1 + 8 * torch.rand(HD // 2, generator=g)).sort().values.tolist()

# (lengen posenc_kwargs, HF rope_parameters) pairs describing the same scaling
CASES = {
    "linear": ({"scaling": "linear", "factor": 4.0}, {"rope_type": "linear", "factor": 4.0}),
    "dynamic": ({"scaling": "dynamic", "factor": 2.0, "original_length": L0},
                {"rope_type": "dynamic", "factor": 2.0}),
    "yarn": ({"scaling": "yarn", "factor": 4.0, "original_length": L0},
             {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": L0}),
    "llama3": ({"scaling": "llama3", "factor": 8.0, "original_length": L0},
               {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": L0}),
    "llama3-custom": ({"scaling": "llama3", "factor": 3.0, "original_length": 40,
                       "low_freq_factor": 2.0, "high_freq_factor": 8.0, "base": 500.0},
                      {"rope_type": "llama3", "factor": 3.0, "low_freq_factor": 2.0,
                       "high_freq_factor": 8.0, "original_max_position_embeddings": 40,
                       "rope_theta": 500.0}),
    "longrope": ({"scaling": "longrope", "factor": 4.0, "original_length": L0,
                  "short_factor": SHORT, "long_factor": LONG},
                 {"rope_type": "longrope", "factor": 4.0, "short_factor": SHORT,
                  "long_factor": LONG, "original_max_position_embeddings": L0}),
    "longrope-attn": ({"scaling": "longrope", "factor": 4.0, "original_length": L0,
                       "short_factor": SHORT, "long_factor": LONG, "attention_factor": 1.3},
                      {"rope_type": "longrope", "factor": 4.0, "short_factor": SHORT,
                       "long_factor": LONG, "original_max_position_embeddings": L0,
                       "attention_factor": 1.3}),
}


def hf_config(params: dict) -> LlamaConfig:
    p = {"rope_theta": 10000.0, **params}
    # dynamic NTK reads L0 from max_position_embeddings
    return LlamaConfig(hidden_size=2 * HD, num_attention_heads=2, head_dim=HD,
                       max_position_embeddings=L0 * 4 if p["rope_type"] == "longrope" else L0,
                       rope_parameters=p)


def ours(kw: dict) -> RoPE:
    return RoPE(d_model=2 * HD, n_heads=2, head_dim=HD, **kw)


@pytest.mark.parametrize("name", [n for n in CASES if n != "dynamic"])
def test_inv_freq_and_attention_factor_equal_transformers(name):
    kw, params = CASES[name]
    cfg = hf_config(params)
    hf_inv, hf_attn = ROPE_INIT_FUNCTIONS[params["rope_type"]](cfg, None)
    s = ours(kw)
    torch.testing.assert_close(s.inv_freq, hf_inv.float(), rtol=1e-6, atol=0)
    assert s.mscale == pytest.approx(hf_attn, rel=1e-12)
    if params["rope_type"] == "longrope":       # the long list, for lengths past L0
        hf_long, _ = ROPE_INIT_FUNCTIONS["longrope"](cfg, None, seq_len=L0 + 1)
        torch.testing.assert_close(s.long_inv_freq, hf_long.float(), rtol=1e-6, atol=0)
        assert not torch.allclose(hf_long, hf_inv)


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("T", [L0 // 2, L0, L0 + 1, 3 * L0])
def test_cos_sin_equal_llama_rotary_embedding(name, T):
    """cos / sin over positions 0..T-1 (a fresh HF module per call: its dynamic-NTK cache keeps
    the largest length seen, which is a decoding-time policy, not the formula)."""
    kw, params = CASES[name]
    emb = LlamaRotaryEmbedding(hf_config(params))
    x = torch.zeros(1, T, HD)
    pos = torch.arange(T)
    hf_cos, hf_sin = emb(x, pos[None])                  # [1, T, HD]
    cos, sin = ours(kw).cos_sin(pos.float(), torch.float32)
    torch.testing.assert_close(cos, hf_cos[0], rtol=1e-5, atol=2e-5)
    torch.testing.assert_close(sin, hf_sin[0], rtol=1e-5, atol=2e-5)


def test_llama3_bands():
    """High frequencies kept, low ones divided by the factor, the band between blended."""
    s = ours(CASES["llama3"][0])
    plain = ours({}).inv_freq
    wavelen = 2 * torch.pi / plain
    high, low = wavelen < L0 / 4.0, wavelen > L0 / 1.0
    assert high.any() and low.any() and (~high & ~low).any()
    torch.testing.assert_close(s.inv_freq[high], plain[high])
    torch.testing.assert_close(s.inv_freq[low], plain[low] / 8.0)
    mid = ~high & ~low
    assert ((s.inv_freq[mid] < plain[mid]) & (s.inv_freq[mid] > plain[mid] / 8.0)).all()


@pytest.mark.parametrize("kw,match", [
    ({"scaling": "llama3", "factor": 8.0, "original_length": 8, "beta_fast": 4.0},
     "beta_fast is not an option of scaling=llama3.*takes factor, original_length, "
     "low_freq_factor, high_freq_factor"),
    ({"scaling": "yarn", "factor": 2.0, "original_length": 8, "low_freq_factor": 1.0},
     "low_freq_factor is not an option of scaling=yarn"),
    ({"scaling": "llama3", "factor": 8.0, "original_length": 8, "low_freq_factor": 4.0,
      "high_freq_factor": 2.0}, "high_freq_factor"),
    ({"scaling": "llama3", "factor": 8.0}, "original_length"),
    ({"scaling": "longrope", "original_length": 8, "short_factor": [1.0] * 8},
     "needs posenc_kwargs.long_factor"),
    ({"scaling": "longrope", "original_length": 8, "short_factor": [1.0] * 8,
      "long_factor": [2.0] * 3}, "long_factor must be 8 numbers"),
    ({"scaling": "linear", "factor": 2.0, "short_factor": [1.0] * 8},
     "short_factor is not an option of scaling=linear.*longrope"),
])
def test_bad_llama3_longrope_options(kw, match):
    with pytest.raises(ValueError, match=match):
        ours(kw)


def test_config_validates_and_fills_new_scalings():
    with pytest.raises(ConfigError, match="unknown key 'low_freq'.*low_freq_factor"):
        lengen.resolve({"model": {"posenc": "rope", "posenc_kwargs": {
            "scaling": "llama3", "factor": 8.0, "low_freq": 1.0}}})
    with pytest.raises(ConfigError, match="short_factor"):
        lengen.resolve({"model": {"posenc": "rope", "posenc_kwargs": {
            "scaling": "longrope", "short_factor": "big", "long_factor": [1.0]}}})
    cfg = lengen.resolve({"model": {"posenc": "rope", "posenc_kwargs": {
        "scaling": "llama3", "factor": 8.0}},
        "task": {"name": "copy", "kwargs": {"max_train_length": 6}}}).config
    assert cfg.model.posenc_kwargs["original_length"] == 14
    torch.manual_seed(0)
    hd = cfg.model.d_model // cfg.model.n_heads
    for kw in (cfg.model.posenc_kwargs,
               {"scaling": "longrope", "original_length": 8, "factor": 2.0,
                "short_factor": [1.0] * (hd // 2), "long_factor": [3.0] * (hd // 2)}):
        m = lengen.Transformer(lengen.ModelConfig(vocab_size=7, d_model=cfg.model.d_model,
                                                  n_heads=cfg.model.n_heads, n_layers=1,
                                                  posenc="rope", posenc_kwargs=kw)).eval()
        x = torch.randint(0, 7, (2, 5))
        # within L0 cached decoding equals recomputation
        a = m.generate(x, max_new_tokens=2, use_cache=True)
        b = m.generate(x, max_new_tokens=2, use_cache=False)
        assert [t.tolist() for t in a] == [t.tolist() for t in b]
