"""GPT-2's plain GELU MLP (``model.mlp=gelu``) and the ``gpt2-base`` preset (the index-warping
paper's language model, App. B.2)."""
from __future__ import annotations

import math

import pytest
import torch

import lengen
from lengen.model import ModelConfig, Transformer
from lengen.model.presets import GPT2_BASE, preset
from lengen.model.block import MLP


def test_gelu_mlp_is_gpt2s_tanh_gelu_with_biases():
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=5, d_model=8, n_layers=1, n_heads=2, d_ff=32, mlp="gelu")
    mlp = MLP(cfg).double()
    with torch.no_grad():
        mlp.up.bias.normal_()
        mlp.down.bias.normal_()
    assert mlp.gate is None and mlp.up.bias is not None and mlp.down.bias is not None
    x = 3 * torch.randn(4, 8, dtype=torch.float64)
    h = x @ mlp.up.weight.T + mlp.up.bias
    g = 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))
    want = g @ mlp.down.weight.T + mlp.down.bias
    torch.testing.assert_close(mlp(x), want, rtol=1e-12, atol=1e-12)
    # not the exact (erf) GELU: the two differ visibly at these inputs
    exact = torch.nn.functional.gelu(h) @ mlp.down.weight.T + mlp.down.bias
    assert (mlp(x) - exact).abs().max() > 1e-6


def test_gpt2_base_preset_parameter_count():
    cfg = lengen.resolve(preset("gpt2-base", posenc="rope"), ["model.vocab_size=50257"],
                         check_device=False).config
    m = Transformer(cfg.model)
    assert (cfg.model.n_layers, cfg.model.n_heads, cfg.model.d_model, cfg.model.d_ff) == \
        (12, 12, 768, 3072)
    assert m.head.weight is m.embed.weight                         # tied
    n = sum(p.numel() for p in m.parameters())
    d, f, V = 768, 3072, 50257
    block = 4 * d * d + (d * f + f) + (f * d + d) + 2 * (2 * d)     # attention, MLP, 2 LayerNorms
    assert n == 12 * block + 2 * d + V * d == 123_616_512
    # HF gpt2 = this + its learned position table (1024 x 768) + q/k/v/out biases (12 x 4 x 768)
    assert n + 1024 * d + 12 * 4 * d == 124_439_808
    assert cfg.train.lr == 5e-5 and cfg.train.weight_decay == 0 and cfg.train.batch_size == 64
    assert tuple(cfg.train.betas) == (0.9, 0.999)


@pytest.mark.parametrize("posenc", ["rope", "alibi"])
def test_gpt2_base_shape_runs_small(posenc):
    cfg = dict(GPT2_BASE, n_layers=2, n_heads=2, d_model=16, d_ff=64, vocab_size=11, posenc=posenc)
    m = Transformer(ModelConfig(**cfg))
    out = m(torch.randint(0, 11, (2, 7)))
    assert out.shape == (2, 7, 11) and torch.isfinite(out).all()
