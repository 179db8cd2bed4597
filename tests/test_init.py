"""Initialisation: the generic schemes (normal, haiku = Ruoss et al.'s reference defaults), each
positional scheme's own init surviving the generic one, embedding dropout placement and which
parameters are weight-decayed."""
from __future__ import annotations

import pytest
import torch
from torch import nn

import lengen
from lengen.model.presets import preset
from lengen.train.optim import param_groups


def model(**kw):
    torch.manual_seed(0)
    return lengen.Transformer(lengen.ModelConfig(**{"vocab_size": 11, "d_model": 64,
                                                    "n_layers": 2, "n_heads": 4, **kw}))


def test_t5_table_starts_at_zero_after_the_generic_init():
    """Before the fix the model's generic N(0, 0.02) init overwrote T5's own zero init."""
    m = model(posenc="t5")
    assert torch.equal(m.posenc.table.weight, torch.zeros_like(m.posenc.table.weight))


def test_haiku_init_statistics():
    m = model(init="haiku", posenc="learned", posenc_kwargs={"max_positions": 4096},
              mlp="relu", norm="layer")
    for name, mod in m.named_modules():
        if isinstance(mod, nn.Linear) and mod.weight.numel() >= 4096:
            w, std = mod.weight, mod.in_features ** -0.5
            assert w.abs().max() <= 2 * std + 1e-6, name                   # truncated at 2 std
            # a normal truncated at +-2 has std 0.88 of the untruncated one
            assert abs(w.std().item() / std - 0.88) < 0.06, (name, w.std().item() / std)
    emb = m.embed.weight
    assert emb.abs().max() <= 0.04 + 1e-7 and abs(emb.std().item() / 0.02 - 0.88) < 0.1
    table = m.posenc.table
    assert table.abs().max() <= 2.0 and abs(table.std().item() - 0.88) < 0.03
    normal = model(posenc="learned", posenc_kwargs={"max_positions": 4096})
    assert abs(normal.posenc.table.std().item() - 0.02) < 0.002


def test_haiku_xl():
    m = model(init="haiku", posenc="xl", d_model=256)
    w = m.posenc.w_r.weight
    assert w.abs().max() <= 2 * 256 ** -0.5 + 1e-6
    assert abs(m.posenc.u.std().item() - 0.02) < 0.005


@pytest.mark.parametrize("posenc,dropped", [("sincos", True), ("learned", True), ("xl", False),
                                            ("alibi", False), ("nope", False)])
def test_embedding_dropout_only_with_an_additive_scheme(posenc, dropped):
    m = model(posenc=posenc, dropout=0.5, embed_dropout="with_pe", n_layers=1).train()
    seen = []
    m.blocks[0].register_forward_pre_hook(lambda mod, args: seen.append(args[0].clone()))
    tokens = torch.randint(0, 11, (2, 16))
    m(tokens, positions=torch.arange(16.0))
    x = m.posenc.embed(m.embed(tokens), torch.arange(16.0))
    assert torch.equal(seen[0], x) != dropped
    always = model(posenc=posenc, dropout=0.5, n_layers=1).train()
    assert always.embed_dropout


def test_positional_parameters_are_not_decayed():
    m = model(posenc="xl")
    decay, no_decay = param_groups(m, 0.1)
    decayed = {id(p) for p in decay["params"]}
    assert id(m.posenc.w_r.weight) not in decayed
    assert id(m.blocks[0].attn.qkv.weight) in decayed
    all_decay, _ = param_groups(m, 0.1, decay_all=True)
    assert id(m.posenc.w_r.weight) in {id(p) for p in all_decay["params"]}


def test_ruoss_preset_uses_the_reference_init():
    cfg = lengen.resolve(preset("ruoss2023-encoder", posenc="xl"), ["task.name=reverse_string"]).config
    assert cfg.model.init == "haiku" and cfg.model.embed_dropout == "with_pe"
