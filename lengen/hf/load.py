"""A local Hugging Face checkpoint as a lengen model, for ``lengen eval --hf DIR``
(:func:`lengen.runs.evaluate_hf`): ``load_checkpoint(DIR)`` reads the directory offline
(``local_files_only=True``) and returns the model behind lengen's interface:

* a stock transformers model of a supported architecture (``model_type`` in
  :data:`lengen.model.config.HF_MODEL_TYPES`: llama, gpt2) wrapped in
  :class:`lengen.model.HFBackbone` (lengen's position samplers apply through it);
* a ``lengen export --to hf`` directory (``LengenForCausalLM``): the lengen
  :class:`~lengen.model.Transformer` inside it.

``rope_scaling``: one of transformers' own RoPE scalings (``rope_type`` linear, dynamic, yarn,
llama3, longrope and that type's keys, e.g. ``factor``), written into the loaded config's
``rope_parameters`` (the base ``rope_theta`` kept) before the model is built, so the numbers are
transformers' own.
"""
from __future__ import annotations

import math
import os

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from lengen.consent import remote_code_refused, trust_remote_code
from lengen.errors import ConfigError
from lengen.fileio import check_regular_file
from lengen.hf.modeling import MODEL_TYPE, LengenForCausalLM
from lengen.model import HFBackbone, ModelConfig
from lengen.model.config import HF_MODEL_TYPES
from lengen.model.hf_backbone import hf_sizes

#: transformers' RoPE scalings that --rope-scaling may name
ROPE_TYPES = ("linear", "dynamic", "yarn", "llama3", "longrope")


def checkpoint_config(path: str):
    """The transformers config of checkpoint directory ``path`` (offline), or ConfigError."""
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        check_regular_file(os.path.join(path, name), "the --hf file")   # a fifo would block
    if not os.path.isdir(path) or not os.path.isfile(os.path.join(path, "config.json")):
        raise ConfigError(f"--hf {path} is not a Hugging Face checkpoint directory (no "
                          f"config.json); give a directory written by save_pretrained (or "
                          f"lengen export RUN OUT --to hf|llama)")
    try:
        return AutoConfig.from_pretrained(path, local_files_only=True,
                                          trust_remote_code=trust_remote_code())
    except (OSError, ValueError, KeyError) as e:
        refused = remote_code_refused(path, e)
        if refused is not None:
            raise refused from None
        raise ConfigError(f"--hf {path}: transformers cannot read its config.json "
                          f"({type(e).__name__}: {e})") from None


def apply_rope_scaling(config, scaling: dict) -> None:
    """Write ``scaling`` into ``config.rope_parameters`` (see the module docstring)."""
    if not isinstance(scaling, dict) or scaling.get("rope_type") not in ROPE_TYPES:
        raise ConfigError(f"--rope-scaling must be a mapping with rope_type one of "
                          f"{', '.join(ROPE_TYPES)} and that type's keys, e.g. "
                          f"'{{rope_type: linear, factor: 2}}', got {scaling!r}")
    for key, value in scaling.items():
        if key == "rope_type" or value is None:
            continue
        values = value if isinstance(value, (list, tuple)) else [value]
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                   for v in values):
            raise ConfigError(f"--rope-scaling {key}: expected a finite number, got {value!r}")
    factor = scaling.get("factor")
    if factor is not None and not factor > 0:
        raise ConfigError(f"--rope-scaling factor must be > 0 (the context is stretched by it: "
                          f"e.g. 2 for twice the trained length), got {factor}")
    old = getattr(config, "rope_parameters", None)
    if not isinstance(old, dict):
        raise ConfigError(f"--rope-scaling: the {config.model_type} checkpoint has no RoPE "
                          f"(no rope_parameters in its config); it applies to RoPE models such "
                          f"as llama")
    config.rope_parameters = {"rope_theta": old.get("rope_theta"), **scaling}
    try:
        config.validate_rope() if hasattr(config, "validate_rope") else None
    except (ValueError, KeyError, TypeError) as e:
        raise ConfigError(f"--rope-scaling {scaling}: {e}") from None


def load_checkpoint(path: str, *, rope_scaling: dict | None = None, device="cpu"):
    """The model in checkpoint directory ``path`` behind lengen's interface, in eval mode, fp32
    (see the module docstring)."""
    config = checkpoint_config(path)
    mt = config.model_type
    if mt == MODEL_TYPE:                          # lengen's own model, exported with --to hf
        if rope_scaling is not None:
            raise ConfigError("--rope-scaling applies to transformers' RoPE models; this "
                              "checkpoint is a lengen model (set its scaling in "
                              "model.posenc_kwargs when training)")
        hf = LengenForCausalLM.from_pretrained(path, local_files_only=True,
                                               trust_remote_code=trust_remote_code())
        return hf.model.float().to(device).eval()
    if mt not in HF_MODEL_TYPES:
        raise ConfigError(f"--hf {path}: model_type {mt!r} is not supported; lengen evaluates "
                          f"{', '.join(HF_MODEL_TYPES)} checkpoints (and lengen exports)")
    if rope_scaling is not None:
        apply_rope_scaling(config, rope_scaling)
    try:
        hf = AutoModelForCausalLM.from_pretrained(path, config=config, local_files_only=True,
                                                  dtype=torch.float32,
                                                  trust_remote_code=trust_remote_code())
    except (OSError, ValueError, RuntimeError) as e:
        refused = remote_code_refused(path, e)
        if refused is not None:
            raise refused from None
        raise ConfigError(f"--hf {path}: the weights do not load ({type(e).__name__}: "
                          f"{e})") from None
    vocab = hf.get_output_embeddings().out_features
    mc = ModelConfig(vocab_size=vocab, backbone="hf", hf_config={"model_type": mt},
                     **hf_sizes(config))
    return HFBackbone(mc, hf_model=hf).to(device).eval()


__all__ = ["ROPE_TYPES", "apply_rope_scaling", "checkpoint_config", "load_checkpoint"]
