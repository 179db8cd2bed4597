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

Initialisation and dropout as their reference code (JAX/Haiku; ``model.init='haiku'``,
``model.embed_dropout='with_pe'``): every linear layer truncated normal (+-2 std) with std
1/sqrt(fan_in) (Haiku's default), the token embedding truncated normal with std 0.02 (their
``emb_init_scale``), learned position tables truncated normal with std 1 (``hk.Embed``'s
default), Transformer-XL's u and v N(0, 0.02) and W_r a Haiku linear; LayerNorm scale 1, offset
0. Embedding dropout only where a scheme adds to the embeddings (sin/cos and learned, randomized
or not), not for relative / ALiBi / RoPE / none, as in their embedder. Randomized positions are
drawn once per forward pass, shared by the layers (the paper); the reference draws its
attention-level randomized encodings (relative, ALiBi, RoPE) anew in every layer. Randomized
relative / ALiBi use the differences of the sampled positions (the paper's wording); the
reference samples sorted distances instead: ``posenc_kwargs.relative='rank'`` with
``positions_kwargs.zero_first=true`` gives that variant for comparison.

Parameter count, stated because the token spaces differ: the paper's encoder has 249,026
parameters (270,146 with relative encodings). Ours, on a binary task (vocabulary of 2 inputs + 2
outputs + placeholder = 5 ids, one embedding table and one bias-free head), has 249,280: the 5
blocks are identical (49,728 each) and only the in/out layers differ (theirs: a biased one-hot
input layer over 3 ids and a biased output layer over 2 classes, 386 parameters; ours 2 x 5 x 64
= 640). Relative (``xl``) adds 4,224 once (W_r 64x64, u, v), shared by the layers, where the
reference has one set per layer (5 x 4,224 = 21,120).

``deletang2023-lstm``: the LSTM baseline of Deletang et al. (2023) as close as lengen's block
gets (docs/mixers.md): one LSTM layer of hidden size 256 (``model.attention=lstm``, forget-gate
bias 1 as Haiku's), causal (it reads the Chomsky tasks' input, then answers at the placeholders),
no positional scheme, trained as the encoder preset. What remains of the block around it: a
learned embedding table instead of one-hot inputs, the pre-RMSNorm residual sublayer and the
block's SwiGLU MLP, the final norm and the output head.

``zhou2024-2m`` / ``-5m`` / ``-25m`` / ``-268m``: the decoders of Zhou et al. (2024, "Transformers
Can Achieve Length Generalization But Not Robustly", App. B.2, Table B.1): [2, 4, 6, 16] blocks,
d_model [256, 256, 512, 1024], GeGLU FFN of width [1024, 1024, 2048, 4096], [4, 4, 8, 16] heads,
RMSNorm "integrating both PreNorm and PostNorm layers, following the Primer architecture", causal,
no dropout, FIRE shared across layers as the positional scheme (randomized FIRE, their best
recipe, is ``positions="randomized"`` on top). Where the two norms sit is not spelled out (Primer
itself does not describe a post-norm); we read it as the public reimplementation of this setup
does (position-coupling code, ``layer_norm_position='pre_post'``): each sublayer's input is
normalised and so is the residual sum after it, ``x <- N2(x + F(N1(x)))`` (lengen's
``norm_position="pre_post"``). The other reading, a norm on the sublayer output before the
residual add, ``x <- x + N2(F(N1(x)))`` (CogView's sandwich LN), is ``norm_position="sandwich"``.
A final RMSNorm before the head is kept, as in that reimplementation. Training (``train``
section): AdamW with weight decay 0.1, lr 3e-4, 500 linear warm-up steps, cosine decay to 0.1 x lr
at 50k steps, batch 128. Not stated in the paper and left at lengen's defaults: Adam betas
(0.9, 0.95), gradient clipping at 1.0, weight decay on linear matrices only. Sequence packing to
2048 tokens is not applied (lengen batches whole examples).

Parameter counts, which show how the names count: per block 4 d^2 (attention, no biases) + 3 d
d_ff (GeGLU: gate, up, down) + 4 d (four RMSNorms), plus d for the final norm and FIRE's
32 + 32 + 33 H + 2. Without embeddings: 2,099,654 / 4,198,854 / 25,178,954 / 268,502,610, i.e.
2.10M, 4.20M, 25.18M, 268.50M. The token table and the head add 2 x vocab x d (0.07M / 0.07M /
0.13M / 0.27M for a ~130-token addition vocabulary), so 2M, 25M and 268M are the counts in whole
millions, rounded down, with or without embeddings: an addition vocabulary is too small for the
names to tell the two readings apart. They do fix the FFN: "2048 with GeGLU" is three d x d_ff
matrices (a two-matrix FFN would make the 25M model 18.9M). "5M" fits no reading: the 4-block
model has 4.20M (4.26M with embeddings).

``gpt2-base``: the GPT-2 "small/base" decoder (Radford et al. 2019; the HF ``gpt2`` config): 12
blocks of 12 heads, d_model 768, a plain GELU MLP of width 3072 (tanh approximation, with biases),
pre-LayerNorm with a final LayerNorm, token embedding tied to the output head, dropout 0.1,
initialisation N(0, 0.02), causal. The index-warping paper's language model (App. B.2) is this
architecture with RoPE (or ALiBi) in place of GPT-2's learned absolute positions, so the preset
sets no positional scheme (``nope``; pass ``posenc=``). Differences from GPT-2 that remain:
lengen's attention projections have no biases (GPT-2's have), dropout is on the residual branches
only (GPT-2 also drops attention weights and the embedding sum), and GPT-2's 1/sqrt(2 n_layers)
scaling of the residual projections' initialisation is not applied. Parameters with the GPT-2
vocabulary (50,257, tied): 123,616,512 (12 x 7,084,800 per block + the final norm + the
38,597,376-entry token table); HF ``gpt2`` has 124,439,808 (the 786,432-entry position table
and 36,864 attention biases more); the paper says 117M, the count the GPT-2 paper gave. Training
section: the HF causal-LM example's defaults that the index-warping paper says it used (AdamW lr
5e-5, no weight decay, betas (0.9, 0.999), eps 1e-8, no warmup, gradient clipping at 1.0), batch
64. HF decays the learning rate linearly to 0; lengen's schedules are cosine or constant, so the
preset leaves lengen's cosine (``min_lr_frac=0``: also to 0).

``llama4-irope``: Llama 4's interleaved-RoPE ("iRoPE") text layout at cpu scale (Meta's Llama 4
release; Hugging Face ``transformers`` ``models/llama4``): 4 blocks, d_model 128, 4 heads, SwiGLU
MLP of width 256, pre-RMSNorm and a final norm, untied head; layers 0-2 RoPE with chunked local
attention (``chunk``, Llama 4's ``attention_chunk_size``: query i sees keys j <= i of its own
chunk) and q/k RMS-normalised without a weight after RoPE (``qk_norm=rms``, Llama 4's
``use_qk_norm`` / ``Llama4TextL2Norm``), layer 3 (every 4th, ``no_rope_layers``) NoPE with global
causal attention and attention temperature tuning (``attention_kwargs.logn=llama4``). Scaled down
from the release (chunk 8192, ``floor_scale`` 8192, RoPE base 500000) so that both mechanisms act
on cpu-scale lengths: chunk 16 and ``logn_floor_scale`` 16 (``attn_scale`` 0.1 as released), RoPE
base 10000. Not reproduced: the mixture-of-experts MLPs (every layer is dense here) and Llama 4's
interleaved (complex) RoPE channel order, which is lengen's half-split order up to a fixed
permutation of each head's q/k channels (the export applies it).
"""
from __future__ import annotations

import copy

from lengen.registry import lookup

RUOSS2023_ENCODER = dict(d_model=64, n_layers=5, n_heads=8, d_ff=256, mlp="relu", norm="layer",
                         norm_position="post", final_norm=False, embed_scale=True, dropout=0.1,
                         causal=False, init="haiku", embed_dropout="with_pe")
RUOSS2023_TRAIN = dict(optimizer="adam", weight_decay=0.0, betas=[0.9, 0.999], eps=1e-8,
                       schedule="constant", warmup_steps=0, grad_clip=1.0, batch_size=128)
RUOSS2023_LRS = (1e-4, 3e-4, 5e-4)

ZHOU2024_BLOCK = dict(mlp="geglu", norm="rms", norm_position="pre_post", final_norm=True,
                      dropout=0.0, causal=True, posenc="fire")
# name -> (blocks, d_model, FFN width, heads), App. B.2
ZHOU2024_SIZES = {"2m": (2, 256, 1024, 4), "5m": (4, 256, 1024, 4), "25m": (6, 512, 2048, 8),
                  "268m": (16, 1024, 4096, 16)}
ZHOU2024_TRAIN = dict(optimizer="adamw", weight_decay=0.1, lr=3e-4, warmup_steps=500,
                      schedule="cosine", min_lr_frac=0.1, batch_size=128, steps=50_000)


def _zhou2024(size: str) -> dict:
    n_layers, d_model, d_ff, n_heads = ZHOU2024_SIZES[size]
    return {"model": dict(ZHOU2024_BLOCK, n_layers=n_layers, d_model=d_model, d_ff=d_ff,
                          n_heads=n_heads),
            "train": ZHOU2024_TRAIN}

DELETANG2023_LSTM = dict(d_model=256, n_layers=1, n_heads=1, attention="lstm", posenc="nope",
                         causal=True)

GPT2_BASE = dict(n_layers=12, n_heads=12, d_model=768, d_ff=3072, mlp="gelu", norm="layer",
                 norm_position="pre", final_norm=True, tie_embeddings=True, dropout=0.1,
                 init_std=0.02, causal=True)
HF_CLM_TRAIN = dict(optimizer="adamw", lr=5e-5, weight_decay=0.0, betas=[0.9, 0.999], eps=1e-8,
                    warmup_steps=0, schedule="cosine", min_lr_frac=0.0, grad_clip=1.0,
                    batch_size=64)

LLAMA4_CHUNK = 16
LLAMA4_IROPE = dict(d_model=128, n_layers=4, n_heads=4, d_ff=256, mlp="swiglu", norm="rms",
                    norm_position="pre", final_norm=True, causal=True, posenc="rope",
                    layers=[{"chunk": LLAMA4_CHUNK, "qk_norm": "rms", "repeat": 3},
                            {"posenc": "nope",
                             "attention_kwargs": {"logn": "llama4",
                                                  "logn_floor_scale": LLAMA4_CHUNK,
                                                  "logn_attn_scale": 0.1}}])

# Literal registry: name -> {"model": {...}, "train": {...}}
PRESETS: dict[str, dict] = {
    "ruoss2023-encoder": {"model": RUOSS2023_ENCODER, "train": RUOSS2023_TRAIN},
    "deletang2023-lstm": {"model": DELETANG2023_LSTM, "train": RUOSS2023_TRAIN},
    "zhou2024-2m": _zhou2024("2m"),
    "zhou2024-5m": _zhou2024("5m"),
    "zhou2024-25m": _zhou2024("25m"),
    "zhou2024-268m": _zhou2024("268m"),
    "gpt2-base": {"model": GPT2_BASE, "train": HF_CLM_TRAIN},
    "llama4-irope": {"model": LLAMA4_IROPE, "train": {}},
}


def preset(name: str, **model_overrides) -> dict:
    """A deep copy of preset ``name`` as a config dict, ``model_overrides`` applied to its model
    section (e.g. ``posenc="rope"``)."""
    out = copy.deepcopy(lookup(PRESETS, name, "preset"))
    out["model"].update(copy.deepcopy(model_overrides))
    return out


__all__ = ["PRESETS", "DELETANG2023_LSTM", "RUOSS2023_ENCODER", "RUOSS2023_TRAIN",
           "RUOSS2023_LRS", "ZHOU2024_BLOCK", "ZHOU2024_SIZES", "ZHOU2024_TRAIN", "GPT2_BASE",
           "HF_CLM_TRAIN", "LLAMA4_IROPE", "preset"]
