"""Named model and training presets from the papers, as config-dict sections.

They are plain dicts so they merge with ``lengen.resolve`` and with dotted overrides::

    from lengen.model.presets import preset
    cfg = lengen.resolve(preset("ruoss2023-encoder", posenc="xl", positions="randomized"),
                         ["task.name=reverse_string"])

``ruoss2023-encoder``: the encoder of Deletang et al. (2023) / Ruoss et al. (2023): 5 blocks of
8 heads, d_model 64, ReLU FFN of width 256 (with biases), post-LayerNorm, no final norm, token
embeddings scaled by sqrt(d_model), dropout 0.1, bidirectional (``causal=False``), attention
projections without biases; trained with Adam (betas 0.9 / 0.999, no weight decay, no schedule,
no warmup), global-norm gradient clipping at 1.0, batch 128. Learning rates of the paper: 1e-4,
3e-4, 5e-4 (``RUOSS2023_LRS``).

Parameter count, stated because the token spaces differ: the paper's encoder has 249,026
parameters (270,146 with relative encodings). Ours, on a binary task (vocabulary of 2 inputs + 2
outputs + placeholder = 5 ids, one embedding table and one bias-free head), has 249,280: the 5
blocks are identical (49,728 each) and only the in/out layers differ (theirs: a biased one-hot
input layer over 3 ids and a biased output layer over 2 classes, 386 parameters; ours 2 x 5 x 64
= 640). Relative (``xl``) adds 4,224 once (W_r 64x64, u, v), shared by the layers, where the
reference has one set per layer (5 x 4,224 = 21,120).
"""
from __future__ import annotations

import copy

RUOSS2023_ENCODER = dict(d_model=64, n_layers=5, n_heads=8, d_ff=256, mlp="relu", norm="layer",
                         norm_position="post", final_norm=False, embed_scale=True, dropout=0.1,
                         causal=False)
RUOSS2023_TRAIN = dict(optimizer="adam", weight_decay=0.0, betas=[0.9, 0.999], eps=1e-8,
                       schedule="constant", warmup_steps=0, grad_clip=1.0, batch_size=128)
RUOSS2023_LRS = (1e-4, 3e-4, 5e-4)

# Literal registry: name -> {"model": {...}, "train": {...}}
PRESETS: dict[str, dict] = {
    "ruoss2023-encoder": {"model": RUOSS2023_ENCODER, "train": RUOSS2023_TRAIN},
}


def preset(name: str, **model_overrides) -> dict:
    """A deep copy of preset ``name`` as a config dict, ``model_overrides`` applied to its model
    section (e.g. ``posenc="rope"``)."""
    from lengen.registry import lookup

    out = copy.deepcopy(lookup(PRESETS, name, "preset"))
    out["model"].update(copy.deepcopy(model_overrides))
    return out


__all__ = ["PRESETS", "RUOSS2023_ENCODER", "RUOSS2023_TRAIN", "RUOSS2023_LRS", "preset"]
