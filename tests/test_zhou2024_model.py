"""The Zhou et al. (2024) model: the pre + post RMSNorm block (``norm_position='pre_post'``) and
the 2M / 5M / 25M / 268M presets (sizes of App. B.2, training protocol of Table B.1)."""
from __future__ import annotations

import pytest
import torch

import lengen
from lengen.model import ModelConfig, Transformer
from lengen.model.presets import PRESETS, ZHOU2024_SIZES, preset
from lengen.model.block import Block


def small_cfg(norm_position, **kw):
    return ModelConfig(vocab_size=7, d_model=16, n_layers=2, n_heads=2, norm_position=norm_position,
                       mlp="geglu", posenc="fire", **kw)


@pytest.mark.parametrize("norm_position", ["pre_post", "sandwich"])
def test_block_norm_placement(norm_position):
    torch.manual_seed(0)
    cfg = small_cfg(norm_position)
    block = Block(cfg, 0)
    with torch.no_grad():                  # distinct norm weights so a swapped norm would show
        for i, n in enumerate((block.norm1, block.norm2, block.post1, block.post2)):
            n.weight.copy_(1.0 + 0.1 * (i + 1) * torch.randn(16))
    posenc = Transformer(cfg).posenc
    x = 3 * torch.randn(2, 9, 16)
    pos = torch.arange(9.0)
    got = block(x, pos, posenc)
    attn = lambda h: block.attn(h, pos, posenc)  # noqa: E731
    if norm_position == "pre_post":        # N2(x + F(N1(x))) for each sublayer
        h = block.post1(x + attn(block.norm1(x)))
        want = block.post2(h + block.mlp(block.norm2(h)))
        # the residual stream leaves every sublayer RMS-normalised (times the norm's weight)
        rms = (want / block.post2.weight).pow(2).mean(-1).sqrt()
        torch.testing.assert_close(rms, torch.ones_like(rms), atol=1e-4, rtol=0)
    else:                                  # x + N2(F(N1(x)))
        h = x + block.post1(attn(block.norm1(x)))
        want = h + block.post2(block.mlp(block.norm2(h)))
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def expected_params(n_layers, d, d_ff, H, hidden=32):
    """Non-embedding parameters: attention 4 d^2 (no biases), GeGLU 3 d d_ff, four RMSNorms per
    block, the final RMSNorm, FIRE (w1, b1, w2, b2, log c, log L)."""
    block = 4 * d * d + 3 * d * d_ff + 4 * d
    return n_layers * block + d + (hidden + hidden + hidden * H + H + 2)


# the names of the paper vs the non-embedding counts
NAMED = {"2m": 2 * 10 ** 6, "5m": 5 * 10 ** 6, "25m": 25 * 10 ** 6, "268m": 268 * 10 ** 6}
COUNTS = {"2m": 2_099_654, "5m": 4_198_854, "25m": 25_178_954, "268m": 268_502_610}


@pytest.mark.parametrize("size", list(ZHOU2024_SIZES))
def test_preset_sizes_and_parameter_counts(size):
    V = 130
    cfg = lengen.resolve(preset(f"zhou2024-{size}"), [f"model.vocab_size={V}"]).config
    n_layers, d, d_ff, H = ZHOU2024_SIZES[size]
    m = cfg.model
    assert (m.n_layers, m.d_model, m.d_ff, m.n_heads) == (n_layers, d, d_ff, H)
    assert (m.mlp, m.norm, m.norm_position, m.dropout, m.causal, m.posenc) == \
        ("geglu", "rms", "pre_post", 0.0, True, "fire")
    with torch.device("meta"):                      # 268M parameters: count without allocating
        model = Transformer(m)
    embedding = model.embed.weight.numel() + model.head.weight.numel()
    assert embedding == 2 * V * d
    non_embedding = model.num_params() - embedding
    assert non_embedding == expected_params(n_layers, d, d_ff, H) == COUNTS[size]
    # 2M, 25M, 268M are the counts in whole millions (rounded down), with or without the
    # embeddings (tiny for an addition vocabulary, so the names cannot tell the readings apart);
    # "5m" fits neither: 4.2M
    for count in (non_embedding, model.num_params()):
        assert (count // 10 ** 6 == NAMED[size] // 10 ** 6) == (size != "5m")
    # a two-matrix FFN of the same width would not give the 25M model its name
    assert n_layers * (4 * d * d + 2 * d * d_ff) < 0.8 * NAMED[size] or size in ("2m", "5m")


def test_preset_training_protocol():
    cfg = lengen.resolve(preset("zhou2024-25m")).config
    t = cfg.train
    assert (t.optimizer, t.weight_decay, t.lr, t.warmup_steps, t.schedule, t.min_lr_frac,
            t.batch_size, t.steps) == ("adamw", 0.1, 3e-4, 500, "cosine", 0.1, 128, 50_000)
    # the schedule: linear warm-up from 0, cosine to 0.1 x lr at the last step
    from lengen.train.optim import lr_factor
    kw = dict(total=50_000, warmup=500, min_frac=0.1, schedule="cosine")
    assert lr_factor(0, **kw) == pytest.approx(1 / 500) and lr_factor(499, **kw) == 1.0
    assert lr_factor(50_000, **kw) == pytest.approx(0.1)
    # presets are independent copies; overrides reach the model section
    p = preset("zhou2024-2m", positions="randomized")
    assert p["model"]["positions"] == "randomized"
    assert "positions" not in PRESETS["zhou2024-2m"]["model"]


def test_small_preset_trains_a_step():
    cfg = lengen.resolve(preset("zhou2024-2m", vocab_size=11, n_layers=1, d_model=32, d_ff=64,
                                n_heads=4, positions="randomized",
                                positions_kwargs={"max_length": 1024})).config   # the default task: 511 tokens
    torch.manual_seed(0)
    model = Transformer(cfg.model).train()
    tokens = torch.randint(0, 11, (3, 17))
    loss = torch.nn.functional.cross_entropy(model(tokens[:, :-1]).flatten(0, 1),
                                             tokens[:, 1:].flatten())
    loss.backward()
    assert torch.isfinite(loss)
    assert all(p.grad is not None and torch.isfinite(p.grad).all()
               for p in model.parameters())
