"""Writing lengen models as Hugging Face checkpoints: ``lengen export RUN OUT --to
hf|llama|llama4``.

* ``hf``: :class:`lengen.hf.modeling.LengenForCausalLM` (every lengen model; loads after
  ``import lengen.hf``).
* ``llama``: a stock ``LlamaForCausalLM`` that loads without lengen, written only when the lengen
  model *is* a Llama, i.e. computes the same function with Llama's modules:

  - decoder (``model.causal=true``), ``attention=softmax`` (no kwargs: plain scaled dot product,
    1/sqrt(head_dim), no q/k norm), n_heads query = key/value heads;
  - ``posenc=rope`` rotating the whole head (``rotary_fraction=1``; lengen pairs channel c with
    c + d/2, Llama's ``rotate_half`` layout), any base, and ``scaling`` none / linear / dynamic /
    yarn / llama3 / longrope, written as Llama's ``rope_parameters`` (tested equal to
    transformers' own RoPE in tests/test_rope_hf.py);
  - positions 0, 1, ... at evaluation (a sampler whose evaluation positions are the identity:
    ``identity``, and randomized ones in their ``identity`` eval mode);
  - ``mlp=swiglu`` (no biases), ``norm=rms`` (lengen's eps 1e-6), ``norm_position=pre``,
    ``final_norm=true``, ``embed_scale=false``; ``tie_embeddings`` maps to
    ``tie_word_embeddings``; dropout is inactive at inference.

  Anything else is refused by :func:`llama_refusals`, naming each setting Llama cannot express.
  Weights: lengen's fused ``qkv`` rows [q; k; v] (head-major within each) split into
  ``q_proj`` / ``k_proj`` / ``v_proj``; ``proj`` -> ``o_proj``; ``gate`` / ``up`` / ``down`` ->
  ``gate_proj`` / ``up_proj`` / ``down_proj``; ``norm1`` / ``norm2`` -> ``input_layernorm`` /
  ``post_attention_layernorm``; ``norm_f`` -> ``model.norm``; ``head`` -> ``lm_head``.
  HF's dynamic NTK keeps the largest length a module has seen between calls (a decoding-time
  cache policy); a single forward pass equals lengen's.
* ``llama4``: a stock ``Llama4ForCausalLM`` (text model, dense MLPs) for per-layer RoPE / NoPE
  layouts with chunked attention, q/k norm and temperature tuning (:mod:`lengen.hf.llama4`).
* a run with a Hugging Face backbone (``model.backbone=hf``): its transformers model as it is,
  with either format (``llama`` only for a Llama), when its positions at evaluation are 0, 1, ...
"""
from __future__ import annotations

import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from lengen.errors import ExportError
from lengen.hf.llama4 import (RMS_EPS, block_refusals, identity_at_eval as _identity_at_eval,
                              to_llama4)
from lengen.hf.modeling import LengenConfig, LengenForCausalLM
from lengen.model import HFBackbone, Transformer
from lengen.rundir.load import load_run

EXPORT_FORMATS = ("hf", "llama", "llama4")
_ROPE_DEFAULTS = {"base": 10000.0, "rotary_fraction": 1.0, "scaling": "none", "factor": 1.0}


def to_hf(model: Transformer, task: dict | None = None):
    """A :class:`LengenForCausalLM` holding a copy of ``model``'s weights."""
    hf = LengenForCausalLM(LengenConfig(lengen_model=model.cfg.to_dict(), lengen_task=task))
    hf.model.load_state_dict(model.state_dict())
    return hf.eval()


def llama_refusals(model: Transformer) -> list[str]:
    """What in ``model`` a stock ``LlamaForCausalLM`` cannot express (empty: it maps exactly)."""
    mc, why = model.cfg, []
    if not mc.causal:
        why.append("model.causal=false (an encoder; Llama is a causal decoder)")
    if mc.layers:
        why.append("model.layers (a per-layer layout; Llama's layers are alike: see --to "
                   "llama4 for RoPE / NoPE layouts)")
    for key, default in (("window", None), ("chunk", None), ("qk_norm", "none")):
        if getattr(mc, key) != default:
            why.append(f"model.{key}={getattr(mc, key)} (Llama has no "
                       f"{'q/k norm' if key == 'qk_norm' else 'local attention mask'})")
    if mc.attention != "softmax" or mc.attention_kwargs:
        what = (f"model.attention={mc.attention}" if mc.attention != "softmax" else
                f"model.attention_kwargs={mc.attention_kwargs}")
        why.append(f"{what} (Llama's attention is plain softmax attention)")
    if mc.posenc != "rope":
        why.append(f"model.posenc={mc.posenc} (Llama rotates every head with RoPE)")
    elif not mc.layers:                  # (a layout is refused above; layer 0 may not rotate)
        rope = model.posenc
        if rope.rot_dim != rope.head_dim:
            why.append(f"model.posenc_kwargs.rotary_fraction={rope.rotary_fraction} (Llama "
                       f"rotates the whole head: rotary_fraction=1)")
    why += block_refusals(model)
    return why


def _rope_parameters(model: Transformer) -> tuple[dict, int | None]:
    """Llama's ``rope_parameters`` for lengen's RoPE, and the max_position_embeddings it needs."""
    kw = {**_ROPE_DEFAULTS, **model.cfg.posenc_kwargs}
    rope = model.posenc
    p = {"rope_theta": rope.base}
    scaling, L0 = rope.scaling, rope.original_length
    if scaling == "none":
        return {**p, "rope_type": "default"}, None
    p.update(rope_type=scaling, factor=rope.factor)
    if scaling == "dynamic":
        return p, L0                 # HF's dynamic NTK reads L0 from max_position_embeddings
    if scaling == "yarn":
        p.update(original_max_position_embeddings=L0, beta_fast=float(kw.get("beta_fast") or 32),
                 beta_slow=float(kw.get("beta_slow") or 1), attention_factor=rope.mscale)
    elif scaling == "llama3":
        p.update(original_max_position_embeddings=L0,
                 low_freq_factor=float(kw.get("low_freq_factor") or 1.0),
                 high_freq_factor=float(kw.get("high_freq_factor") or 4.0))
    elif scaling == "longrope":
        p.update(original_max_position_embeddings=L0, attention_factor=rope.mscale,
                 short_factor=[float(x) for x in kw["short_factor"]],
                 long_factor=[float(x) for x in kw["long_factor"]])
    return p, (int(L0 * rope.factor) if L0 else None)


def llama_config(model: Transformer):
    """The ``LlamaConfig`` of a lengen model that maps onto Llama (else ExportError)."""
    why = llama_refusals(model)
    if why:
        raise ExportError("this lengen model cannot be written as a stock LlamaForCausalLM: "
                          + "; ".join(why) + ". Export it with --to hf instead (a "
                          "LengenForCausalLM, loadable after `import lengen.hf`)")
    mc = model.cfg
    rope, max_pos = _rope_parameters(model)
    return LlamaConfig(vocab_size=mc.vocab_size, hidden_size=mc.d_model,
                       intermediate_size=mc.d_ff, num_hidden_layers=mc.n_layers,
                       num_attention_heads=mc.n_heads, num_key_value_heads=mc.n_heads,
                       head_dim=mc.d_model // mc.n_heads, hidden_act="silu",
                       max_position_embeddings=max_pos or 4096, rms_norm_eps=RMS_EPS,
                       rope_parameters=rope, attention_bias=False, mlp_bias=False,
                       attention_dropout=0.0, tie_word_embeddings=mc.tie_embeddings)


def llama_state_dict(model: Transformer) -> dict[str, torch.Tensor]:
    """lengen's parameters under Llama's names (see the module docstring)."""
    D = model.cfg.d_model
    sd = {"model.embed_tokens.weight": model.embed.weight,
          "model.norm.weight": model.norm_f.weight, "lm_head.weight": model.head.weight}
    for i, b in enumerate(model.blocks):
        pre = f"model.layers.{i}."
        q, k, v = b.attn.qkv.weight.split(D, dim=0)                 # each [D, D]
        sd.update({pre + "self_attn.q_proj.weight": q, pre + "self_attn.k_proj.weight": k,
                   pre + "self_attn.v_proj.weight": v,
                   pre + "self_attn.o_proj.weight": b.attn.proj.weight,
                   pre + "mlp.gate_proj.weight": b.mlp.gate.weight,
                   pre + "mlp.up_proj.weight": b.mlp.up.weight,
                   pre + "mlp.down_proj.weight": b.mlp.down.weight,
                   pre + "input_layernorm.weight": b.norm1.weight,
                   pre + "post_attention_layernorm.weight": b.norm2.weight})
    return {k: v.detach().clone() for k, v in sd.items()}


def to_llama(model: Transformer):
    """A stock ``LlamaForCausalLM`` computing what ``model`` computes (else ExportError)."""
    cfg = llama_config(model)
    with torch.device("cpu"):
        llama = LlamaForCausalLM(cfg)
    missing, unexpected = llama.load_state_dict(llama_state_dict(model), strict=False)
    missing = [k for k in missing if not (cfg.tie_word_embeddings and k == "lm_head.weight")]
    if missing or unexpected:                    # a transformers version with other names
        raise ExportError(f"the installed transformers' LlamaForCausalLM has other parameter "
                          f"names (missing {missing}, unexpected {unexpected}); lengen.hf "
                          f"supports transformers >= 5.23")
    return llama.eval()


def export_run(run_dir: str, out: str, to: str = "hf") -> str:
    """Write the weights of the run in ``run_dir`` (its final model, else its newest
    checkpoint) to ``out`` as a Hugging Face directory (config.json + model.safetensors) of
    format ``to`` (``hf`` or ``llama``); returns ``out``."""
    if to not in EXPORT_FORMATS:
        raise ExportError(f"unknown export format {to!r}; valid: {', '.join(EXPORT_FORMATS)}")
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise ExportError(f"{out} exists and is not an empty directory; give a new directory "
                          f"to export into (nothing there is overwritten)")
    cfg, _task, model = load_run(run_dir)
    model = model.float()
    if isinstance(model, HFBackbone):
        hf = hf_backbone_export(model, to)
    else:
        hf = (to_hf(model, task={"name": cfg.task.name, "kwargs": cfg.task.kwargs}) if to == "hf"
              else to_llama(model) if to == "llama" else to_llama4(model))
    if not getattr(hf.config, "lengen_task", None):
        # the task the weights were trained on, recorded in every export's config.json so that
        # lengen eval --hf refuses to score them on another task (lengen.runs.evaluate_hf)
        hf.config.lengen_task = {"name": cfg.task.name, "kwargs": cfg.task.kwargs}
    hf.save_pretrained(out, safe_serialization=True)
    return out


def hf_backbone_export(model: HFBackbone, to: str):
    """The transformers model of a ``model.backbone=hf`` run, written as it is (a stock
    checkpoint for both formats; ``llama`` only when it is a Llama). The position sampler is
    lengen's and is not written, so a sampler whose evaluation positions are not 0, 1, ... is
    refused: the checkpoint would compute something else."""
    mt = model.hf.config.model_type
    if to == "llama4":
        raise ExportError(f"--to llama4 writes lengen's own layouts; this run's backbone is a "
                          f"transformers {mt}: export it with --to hf (a stock {mt} checkpoint)")
    if to == "llama" and mt != "llama":
        raise ExportError(f"this run's backbone is a {mt} (model.hf_config.model_type={mt}), not "
                          f"a Llama; export it with --to hf (a stock {mt} checkpoint)")
    if not _identity_at_eval(model):
        raise ExportError(f"model.positions={model.cfg.positions} with "
                          f"{model.cfg.positions_kwargs}: a transformers checkpoint uses "
                          f"positions 0, 1, ... and this sampler does not at evaluation; "
                          f"evaluate the run with lengen eval instead")
    return model.hf.eval()


__all__ = ["EXPORT_FORMATS", "export_run", "llama_config", "llama_refusals", "llama_state_dict",
           "to_hf", "to_llama"]
