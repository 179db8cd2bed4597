"""Hugging Face models as lengen backbones (``model.backbone=hf``).

``HFBackbone`` wraps ``AutoModelForCausalLM.from_config(AutoConfig.for_model(**model.hf_config,
vocab_size=model.vocab_size))`` behind the interface of :class:`lengen.model.Transformer` that
training, evaluation, generation, checkpoints and sweeps use: ``cfg``, ``check_inputs``,
``forward(tokens, positions=None, *, cache=None) -> logits [B, T, V]``, ``sample_positions``
(lengen's own sampler, ``model.positions``), ``check_length``, ``new_cache``, ``generate``
(:func:`lengen.model.generate.generate`), ``num_params``. The transformers model itself is
``.hf`` (``model.hf.save_pretrained(dir)`` writes a stock checkpoint).

Positions are lengen's, passed as HF's ``position_ids`` ([B, T]):

* ``rope`` architectures (Llama): any real position. Llama's rotary embedding computes
  ``position_ids[..., None].float() * inv_freq`` (transformers 5.x), so fractional positions
  (interpolation, warping) reach the rotation unrounded; tested equal to a model whose RoPE is
  linearly scaled instead.
* ``table`` architectures (GPT-2's learned ``wpe``): integer positions below ``n_positions``
  only. A sampler that is not declared integer (``integer_positions``) is refused when the config
  is validated, naming ``model.positions``; explicit positions are checked in ``forward``.

An all-ones ``attention_mask`` is always passed: without one (and without a cache), transformers
reads position ids that do not step by exactly 1 (randomized, fractional) as *packed sequences*
and masks attention between the "sequences" it infers, which would silently change the model
(tested).

Decoding: :class:`HFCache` is lengen's :class:`~lengen.model.cache.KVCache` bookkeeping (length,
positions of the cached tokens, ``select`` of the rows that go on) around a transformers
``DynamicCache`` that holds the keys and values.

transformers is an optional dependency: it is imported only when a backbone is built or checked,
and a missing install is a :class:`~lengen.errors.ConfigError` saying what to install.
"""
from __future__ import annotations

import inspect

import torch
from torch import nn

from lengen.checks import did_you_mean
from lengen.errors import ConfigError
from lengen.model.cache import KVCache
from lengen.model.config import HF_MODEL_TYPES, HF_SIZES, ModelConfig
from lengen.model.generate import generate
from lengen.model.transformer import (Transformer, as_model_config, check_positions, check_tokens,
                                      config_sampler, input_problem)

MISSING = ('model.backbone=hf needs Hugging Face transformers: pip install "lengen[hf]" (or use '
           'model.backbone=lengen)')
#: legacy spellings transformers still converts for RoPE models (into ``rope_parameters``)
ROPE_LEGACY = ("rope_theta", "rope_scaling")
TOKEN_IDS = ("bos_token_id", "eos_token_id", "pad_token_id")


def transformers():
    """The ``transformers`` module, or ConfigError saying how to install it (optional dep)."""
    try:
        import transformers as tf  # optional dependency (lengen[hf])
    except ImportError:
        raise ConfigError(MISSING) from None
    return tf


def hf_config_keys(model_type: str) -> set[str]:
    """The keys ``model.hf_config`` may hold for ``model_type``: its config class's arguments,
    their aliases (GPT-2's ``hidden_size`` for ``n_embd`` ...), ``attn_implementation``, and
    for RoPE models the legacy ``rope_theta`` / ``rope_scaling``."""
    cls = transformers().AutoConfig.for_model(model_type).__class__
    keys = set(inspect.signature(cls.__init__).parameters) - {"self", "kwargs", "vocab_size"}
    keys |= set(getattr(cls, "attribute_map", {}) or {}) | {"attn_implementation", "model_type"}
    if "rope_parameters" in keys:
        keys |= set(ROPE_LEGACY)
    return keys


def hf_auto_config(mc: ModelConfig):
    """The transformers config of ``mc`` (backbone=hf): ``model.hf_config`` checked key by key
    (transformers would keep a misspelt key as a stray attribute and build the default model),
    with ``vocab_size`` from ``model.vocab_size``."""
    hc = dict(mc.hf_config)
    mt = hc.pop("model_type")
    allowed = hf_config_keys(mt)
    bad = [k for k in hc if k not in allowed]
    if bad:
        raise ConfigError(f"unknown key(s) {', '.join(f'model.hf_config.{k}' for k in bad)} for "
                          f"model_type={mt} (transformers' {mt} config takes "
                          f"{', '.join(sorted(allowed - {'model_type'}))}).{did_you_mean(bad[0], allowed)}")
    # special token ids are the tokenizer's business; lengen's tasks have their own (GPT-2's
    # default 50256 lies outside a task's small vocabulary), so they stay unset unless given
    unset = {k: None for k in TOKEN_IDS if k in allowed and k not in hc}
    try:
        return transformers().AutoConfig.for_model(mt, vocab_size=mc.vocab_size, **unset, **hc)
    except (ValueError, TypeError, KeyError) as e:
        raise ConfigError(f"model.hf_config={mc.hf_config} is not a valid transformers {mt} "
                          f"config: {e}") from None


def hf_sizes(hf_cfg) -> dict:
    """lengen's size fields of a transformers config (for memory estimates and threads)."""
    d = int(hf_cfg.hidden_size)
    ff = getattr(hf_cfg, "intermediate_size", None) or getattr(hf_cfg, "n_inner", None) or 4 * d
    return {"d_model": d, "n_layers": int(hf_cfg.num_hidden_layers),
            "n_heads": int(hf_cfg.num_attention_heads), "d_ff": int(ff)}


def fill_sizes(mc: ModelConfig, hf_cfg) -> None:
    """Set ``mc``'s d_model / n_layers / n_heads / d_ff from its transformers config ``hf_cfg``
    (backbone=hf); a value set to something else (neither the default nor the HF model's) is a
    ConfigError."""
    sizes = hf_sizes(hf_cfg)
    default = ModelConfig()
    for k in HF_SIZES:
        mine = getattr(mc, k)
        ok = (mine == sizes[k] or mine == getattr(default, k)
              or (k == "d_ff" and mine == 2 * mc.d_model))          # d_ff's own default
        if not ok:
            raise ConfigError(f"model.{k}={mine} disagrees with model.hf_config (which gives "
                              f"{sizes[k]}); with model.backbone=hf the sizes come from "
                              f"model.hf_config: leave model.{k} out")
    for k in HF_SIZES:
        setattr(mc, k, sizes[k])


class HFPositions:
    """How the Hugging Face architecture takes positions (``kind``: ``rope`` or ``table``; a
    loaded checkpoint of another type: ``integer``, positions passed as integer ids), with the
    checks a lengen positional scheme offers (``check_positions``) plus those a table needs."""

    def __init__(self, model_type: str, hf_cfg):
        self.model_type = model_type
        self.kind = HF_MODEL_TYPES.get(model_type, "integer")
        size = getattr(hf_cfg, "max_position_embeddings", None)
        self.n_positions = int(size) if self.kind == "table" and size else None

    @property
    def integer(self) -> bool:
        return self.kind != "rope"

    def check_positions(self, max_pos: float) -> None:
        """ValueError when a position up to ``max_pos`` has no row in the table."""
        if self.n_positions is not None and max_pos > self.n_positions - 1:
            raise ValueError(f"positions up to {max_pos:g} do not fit the {self.model_type} "
                             f"backbone's learned position table (n_positions="
                             f"{self.n_positions}: positions 0..{self.n_positions - 1}); raise "
                             f"model.hf_config.n_positions, or use shorter inputs or a sampler "
                             f"with smaller positions")

    def check_sampler(self, sampler, name: str, key: str = "model.positions") -> None:
        """ConfigError when ``sampler`` may give positions this architecture cannot take."""
        if self.integer and not getattr(sampler, "integer_positions", False):
            raise ConfigError(
                f"{key}={name} gives fractional positions, but the {self.model_type} backbone "
                f"looks positions up in a learned table (one row per integer position"
                f"{'' if self.n_positions is None else f' 0..{self.n_positions - 1}'}); use a "
                f"sampler of integer positions (identity, randomized, label, coupling, abacus) "
                f"or a RoPE architecture (model_type=llama), which takes any real position")

    def position_ids(self, pos: torch.Tensor, B: int, check: bool) -> torch.Tensor:
        """lengen positions [T] / [B, T] -> HF ``position_ids`` [B, T] (float for RoPE, whose
        rotation takes them as they are; int64 for a table, after checking they are integers
        in range when ``check``)."""
        ids = pos.expand(B, -1) if pos.dim() == 1 else pos
        if not self.integer:
            return ids
        if check:
            if not bool((ids == ids.round()).all()):
                raise ConfigError(f"the {self.model_type} backbone takes integer positions (a "
                                  f"learned table), got fractional ones such as "
                                  f"{float(ids[ids != ids.round()][0]):g}")
            lo, hi = float(ids.min()), float(ids.max())
            if lo < 0:
                raise ConfigError(f"the {self.model_type} backbone takes positions >= 0, got {lo:g}")
            try:
                self.check_positions(hi)
            except ValueError as e:
                raise ConfigError(str(e)) from None
        return ids.round().long()


class HFCache(KVCache):
    """lengen's cache bookkeeping (:attr:`length`, the positions of the cached tokens,
    :meth:`select`) around a transformers ``DynamicCache`` (``kv``) holding keys and values."""

    def __init__(self, hf_cfg, capacity: int = 0):
        super().__init__(0, capacity)                    # no lengen layers: HF holds k and v
        self.kv = transformers().DynamicCache(config=hf_cfg)

    def select(self, index: torch.Tensor) -> None:
        super().select(index)
        self.kv.batch_select_indices(index)


class HFBackbone(nn.Module):
    """A transformers causal LM with lengen's model interface (see the module docstring).
    ``hf_model``: an already built (e.g. loaded) transformers model to wrap instead of building
    one from ``cfg.hf_config``; ``sampler``: a position sampler already built for ``cfg``."""

    #: check token ids and positions in forward (see Transformer.check_inputs)
    check_inputs: bool = True
    #: forward takes no ``keep=``: training asks for every logit (lengen.train.step.scored_rows)
    supports_keep: bool = False

    def __init__(self, cfg: ModelConfig | dict, hf_model: nn.Module | None = None, *,
                 sampler=None):
        super().__init__()
        cfg = as_model_config(cfg)
        if cfg.backbone != "hf":
            raise ConfigError(f"HFBackbone needs model.backbone=hf, got {cfg.backbone!r}")
        self.cfg = cfg
        if hf_model is None:
            hf_cfg = hf_auto_config(cfg)
            tf = transformers()
            # a real device even inside a meta-device context; init draws from torch's RNG
            with torch.device("cpu"):
                hf_model = tf.AutoModelForCausalLM.from_config(hf_cfg)
        self.hf = hf_model
        self.posenc = HFPositions(cfg.hf_config["model_type"], self.hf.config)
        if sampler is None:           # else the one validation built (lengen.config.Resolved)
            sampler = config_sampler(cfg)
        self.posenc.check_sampler(sampler, cfg.positions)
        self._sampler = sampler

    # the sampler is checked whenever it is set (lengen eval --positions replaces it)
    @property
    def sampler(self):
        return self._sampler

    @sampler.setter
    def sampler(self, sampler) -> None:
        self.posenc.check_sampler(sampler, getattr(sampler, "registry_name", None)
                                  or type(sampler).__name__)
        self._sampler = sampler

    def check_length(self, length: int) -> None:
        """ValueError when inputs of ``length`` tokens need positions the model cannot take."""
        self.posenc.check_positions(self.sampler.max_position(length))

    def sample_positions(self, length: int, *, batch_size: int | None = None, device=None,
                         generator=None, batch=None, lengths: torch.Tensor | None = None,
                         tokens: torch.Tensor | None = None) -> torch.Tensor:
        """Positions from lengen's sampler, exactly as :meth:`Transformer.sample_positions`
        (whose code reads only ``self.sampler`` and ``self.training``, so it runs here as is)."""
        return Transformer.sample_positions(self, length, batch_size=batch_size, device=device,
                                            generator=generator, batch=batch, lengths=lengths,
                                            tokens=tokens)

    def new_cache(self, capacity: int = 0) -> HFCache:
        return HFCache(self.hf.config, capacity)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor | None = None, *,
                cache: HFCache | None = None) -> torch.Tensor:
        """tokens [B, T] -> logits [B, T, V], as :meth:`Transformer.forward` (positions [T] or
        [B, T], default from the sampler; a non-empty ``cache`` needs the new tokens'
        positions)."""
        check_tokens(tokens)
        B, T = tokens.shape
        if positions is None:
            if cache is not None and cache.length:
                raise ValueError("forward with a non-empty cache needs the new tokens' positions")
            pos = self.sample_positions(T, batch_size=B, device=tokens.device, tokens=tokens)
        else:
            pos = check_positions(positions, B, T)
        check = self.check_inputs and not torch.compiler.is_compiling()
        if check:
            problem = input_problem(tokens, None if positions is None else pos,
                                    self.cfg.vocab_size)
            if problem:
                raise ConfigError(problem)
        ids = self.posenc.position_ids(pos.to(tokens.device), B, check)           # [B, T]
        past = 0
        if cache is not None:
            past = cache.length
            cache.extend_positions(pos)
        # all ones: no padding, and it keeps transformers from reading non-unit position steps
        # as packed sequences (see the module docstring)
        mask = torch.ones(B, past + T, dtype=torch.long, device=tokens.device)
        out = self.hf(input_ids=tokens, attention_mask=mask, position_ids=ids,
                      past_key_values=None if cache is None else cache.kv,
                      use_cache=cache is not None)
        return out.logits                                                         # [B, T, V]

    def generate(self, prompts, max_new_tokens: int, eos_id: int | None = None, *,
                 positions: torch.Tensor | None = None, temperature: float = 0.0,
                 top_k: int | None = None, generator: torch.Generator | None = None,
                 use_cache: bool = True) -> list[torch.Tensor]:
        """Continue each prompt (see :func:`lengen.model.generate.generate`)."""
        return generate(self, prompts, max_new_tokens, eos_id, positions=positions,
                        temperature=temperature, top_k=top_k, generator=generator,
                        use_cache=use_cache)

    def linear_weights(self) -> list[torch.Tensor]:
        """The matrices weight decay applies to (:func:`lengen.train.optim.param_groups`):
        ``nn.Linear`` weights and transformers' ``Conv1D`` (GPT-2's projections)."""
        from transformers.pytorch_utils import Conv1D  # optional dependency, loaded by now

        return [m.weight for m in self.modules() if isinstance(m, (nn.Linear, Conv1D))]

    def replace_head(self, new: nn.Module) -> nn.Module:
        """Put ``new`` in place of the output head (``lm_head``) and return the old one: the
        perplexity protocol scores hidden states a block of rows at a time
        (:func:`lengen.eval.perplexity.hidden_states`)."""
        old = self.hf.get_output_embeddings()
        if old is None:
            raise ConfigError(f"the {self.posenc.model_type} model has no output head that "
                              f"lengen can find (get_output_embeddings() is None)")
        self.hf.set_output_embeddings(new)
        return old

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def check_hf_model(mc: ModelConfig, task, sampler, max_length: int) -> None:
    """Config-time checks of a backbone=hf model (:func:`lengen.config.check_components`): the
    hf_config builds (sizes filled in), the task is a decoder task, the sampler gives positions
    the architecture takes, up to the longest input."""
    hf_cfg = hf_auto_config(mc)
    fill_sizes(mc, hf_cfg)
    if not task.causal:
        raise ConfigError(f"task '{task.name}' is an encoder task (model.causal=false); "
                          f"model.backbone=hf builds causal language models "
                          f"(AutoModelForCausalLM): use a decoder task or model.backbone=lengen")
    pe = HFPositions(mc.hf_config["model_type"], hf_cfg)
    pe.check_sampler(sampler, mc.positions)
    try:
        pe.check_positions(sampler.max_position(max_length))
    except ValueError as e:
        raise ConfigError(str(e)) from None


__all__ = ["HFBackbone", "HFCache", "HFPositions", "hf_auto_config", "hf_sizes", "fill_sizes",
           "check_hf_model", "hf_config_keys"]
