"""Model configuration (a plain dataclass; every field is declared once, with its default, its
rule and its doc: :func:`lengen.checks.option`).

``MODEL_RULES`` (read from the fields) is the table of valid values, checked when a
``ModelConfig`` is made (from a config file, overrides or Python), so an impossible size fails
before any module is built; a config checked once is not checked again until a field changes
(:meth:`ModelConfig.checked`).
Registry names (``posenc``, ``attention``, ``positions``) and their ``*_kwargs`` are checked
against the registries by :func:`lengen.config.validate`.

``backbone``: ``lengen`` (default, :class:`lengen.model.transformer.Transformer`, every field
below) or ``hf``, a Hugging Face ``transformers`` causal LM built from ``hf_config``
(:mod:`lengen.model.hf_backbone`): then the fields that describe lengen's own transformer
(``LENGEN_ONLY``) must keep their defaults, ``d_model`` / ``n_layers`` / ``n_heads`` / ``d_ff``
are filled in from ``hf_config`` when the config is validated, and ``vocab_size`` and
``positions`` (the sampler) are lengen's as for any model.
"""
from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass

from lengen.attention import ATTENTION_POINT, wide_qk_refusal
from lengen.checks import (Bool, Choice, Float, Int, Mapping, Str, check_fields, did_you_mean,
                           option, rules_of)
from lengen.errors import ConfigError
from lengen.posenc import POSENC_POINT, POSENCS
from lengen.posenc.base import PositionalScheme
from lengen.registry import check_kwargs
from lengen.samplers import SAMPLER_POINT

MLPS = ("swiglu", "geglu", "relu", "gelu")
NORMS = ("rms", "layer")
NORM_POSITIONS = ("pre", "post", "sandwich", "pre_post")
ATTN_IMPLS = ("auto", "naive", "lean")     # = lengen.attention.base.IMPLS (tested equal)
INITS = ("normal", "haiku")
EMBED_DROPOUTS = ("always", "with_pe")
BACKBONES = ("lengen", "hf")        # lengen's Transformer | a Hugging Face causal LM


_NAME = "a registry name (see `lengen list`) or an import path package.module:Name"


@dataclass
class ModelConfig:
    # every field declared once: default, rule (MODEL_RULES is read from these) and doc
    vocab_size: int = option(8, Int(min=1), "token ids 0 .. vocab_size - 1; left out of a "
                             "config file, the larger of 8 and the task's vocabulary")
    d_model: int = option(256, Int(min=1), "width of the residual stream")
    n_layers: int = option(4, Int(min=1), "transformer blocks")
    n_heads: int = option(4, Int(min=1), "attention heads (d_model must be divisible by it)")
    d_ff: int | None = option(None, Int(min=1, optional=True),
                              "MLP hidden width; default 2 x d_model (TRA paper, for both the "
                              "linear and the gate units of a GLU)")
    mlp: str = option("swiglu", Choice(*MLPS), "swiglu | geglu | relu | gelu (GPT-2: "
                      "tanh-approximated GELU, not gated; relu and gelu have biases)")
    norm: str = option("rms", Choice(*NORMS), "rms | layer")
    norm_position: str = option("pre", Choice(*NORM_POSITIONS),
                                "pre: x + F(N(x)); post: N(x + F(x)); sandwich: x + N2(F(N1(x))) "
                                "(norms on a sublayer's input and output); pre_post: "
                                "N2(x + F(N1(x))) (pre-norm on the input, post-norm on the "
                                "residual sum; Zhou et al. 2024)")
    final_norm: bool = option(True, Bool(), "norm before the output head (pre-norm models need "
                              "it)")
    dropout: float = option(0.0, Float(min=0, lt=1), "residual dropout, active only in train "
                            "mode")
    tie_embeddings: bool = option(False, Bool(), "the output head shares the token embedding")
    embed_scale: bool = option(False, Bool(), "multiply token embeddings by sqrt(d_model) "
                               "(Ruoss et al.)")
    causal: bool = option(True, Bool(), "False = bidirectional encoder (outputs read from "
                          "placeholders)")
    posenc: str = option("nope", Str(what=_NAME), "positional scheme: a key of "
                         "lengen.posenc.POSENCS, a plugin name or an import path")
    posenc_kwargs: dict = option({}, Mapping(), "keyword arguments of the positional scheme")
    attention: str = option("softmax", Str(what=_NAME), "attention kind: a key of "
                            "lengen.attention.ATTENTIONS, a plugin name or an import path")
    attention_kwargs: dict = option({}, Mapping(), "keyword arguments of the attention kind")
    positions: str = option("identity", Str(what=_NAME), "position sampler: a key of "
                            "lengen.samplers.SAMPLERS, a plugin name or an import path")
    positions_kwargs: dict = option({}, Mapping(), "keyword arguments of the position sampler")
    attn_impl: str = option("auto", Choice(*ATTN_IMPLS), "auto | naive | lean (see "
                            "lengen.attention.base)")
    attn_block_size: int = option(256, Int(min=1), "query block of the lean path")
    init_std: float = option(0.02, Float(gt=0), "normal init: N(0, init_std) for linears and "
                             "embeddings")
    init: str = option("normal", Choice(*INITS), "normal (GPT-style) | haiku (Ruoss et al.'s "
                       "reference: linears trunc-normal 1/sqrt(fan_in), token embeddings "
                       "trunc-normal init_std, learned position tables std 1)")
    embed_dropout: str = option("always", Choice(*EMBED_DROPOUTS),
                                "always: dropout on the embeddings; with_pe: only when the scheme "
                                "adds to them (sin/cos, learned), as Ruoss et al.")
    backbone: str = option("lengen", Choice(*BACKBONES), "lengen | hf (a transformers model "
                           "built from hf_config)")
    hf_config: dict = option({}, Mapping(), "backbone=hf: model_type (llama, gpt2) and that "
                             "architecture's config keys (hidden_size, n_embd ...); vocab_size "
                             "comes from model.vocab_size")

    def __post_init__(self):
        self.validate()
        if self.d_ff is None:
            self.d_ff = 2 * self.d_model
        self._remember(registry=False)

    def validate(self) -> None:
        """Check every field against ``MODEL_RULES`` (coercing YAML strings such as ``1e3``),
        then the cross-field constraints."""
        check_fields(self, MODEL_RULES, "model")
        self._check_backbone()
        if self.d_model % self.n_heads:
            raise ConfigError(f"model.d_model={self.d_model} must be divisible by model.n_heads="
                              f"{self.n_heads} (each head gets d_model / n_heads dimensions); "
                              f"change one of them")
        self._remember(registry=False)

    # -- what was checked, so a config is not checked again while no field changes -------------
    # A ModelConfig remembers its field values (a deep copy) as they were when last found valid
    # (by validate) and whether its registry names and *_kwargs were checked too (registry_parts,
    # or lengen.config's full check of a run: mark_checked). Setting a field afterwards, also
    # inside a *_kwargs dict, makes the next checked() False, so the model checks it again.

    def _remember(self, *, registry: bool) -> None:
        self.__dict__["_checked"] = (asdict(self), registry)

    def checked(self, *, registry: bool = False) -> bool:
        """Whether the fields (and with ``registry=True`` the registry names and ``*_kwargs``)
        were checked with the values they have now."""
        memo = self.__dict__.get("_checked")
        return memo is not None and (memo[1] or not registry) and memo[0] == asdict(self)

    def mark_checked(self) -> None:
        """Record the current values as fully checked (:func:`lengen.config.validate`, after its
        checks and the values it filled in from the task)."""
        self._remember(registry=True)

    def _check_backbone(self) -> None:
        """``backbone=hf``: an ``hf_config`` naming a supported ``model_type`` and no lengen-only
        key changed from its default (it would be silently ignored); ``backbone=lengen``: no
        ``hf_config``. The keys of ``hf_config`` are checked against the architecture's config
        class when the model is built (:mod:`lengen.model.hf_backbone`, needs transformers)."""
        if self.backbone == "lengen":
            if self.hf_config:
                raise ConfigError("model.hf_config applies only with model.backbone=hf (a Hugging "
                                  "Face model); set model.backbone=hf or leave model.hf_config out")
            return
        changed = [k for k in LENGEN_ONLY if getattr(self, k) != _DEFAULTS[k]]
        if changed:
            shown = ", ".join(f"model.{k}={getattr(self, k)!r}" for k in changed)
            raise ConfigError(f"{shown} {'does' if len(changed) == 1 else 'do'} not apply with "
                              f"model.backbone=hf: they describe lengen's own transformer, and the "
                              f"Hugging Face model is defined by model.hf_config alone (e.g. "
                              f"model.hf_config.rope_parameters, model.hf_config.attention_dropout)"
                              f". Leave them out, or use model.backbone=lengen")
        mt = self.hf_config.get("model_type")
        if mt not in HF_MODEL_TYPES:
            raise ConfigError(f"model.hf_config.model_type must be one of "
                              f"{', '.join(HF_MODEL_TYPES)} with model.backbone=hf, got {mt!r} "
                              f"(e.g. model.hf_config={{model_type: llama, hidden_size: 64, "
                              f"num_hidden_layers: 2, num_attention_heads: 4, intermediate_size: "
                              f"128}})")
        if "vocab_size" in self.hf_config:
            raise ConfigError("model.hf_config.vocab_size: the vocabulary is lengen's "
                              "model.vocab_size (filled in from the task); leave it out of "
                              "model.hf_config")

    # -- arguments the model passes to registry classes itself (never from *_kwargs) ------------
    def posenc_args(self) -> dict:
        """Keyword arguments every positional scheme receives from the model."""
        return dict(d_model=self.d_model, n_heads=self.n_heads,
                    head_dim=self.d_model // self.n_heads, causal=self.causal)

    def attention_args(self, layer_idx: int) -> dict:
        """Keyword arguments every attention kind receives from the model (per layer)."""
        return dict(d_model=self.d_model, n_heads=self.n_heads, causal=self.causal,
                    impl=self.attn_impl, block_size=self.attn_block_size, layer_idx=layer_idx,
                    n_layers=self.n_layers)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        """A ModelConfig from a plain dict of its fields; an unknown key is a ConfigError
        listing the valid ones (``ModelConfig(**d)`` would raise a bare TypeError)."""
        if not isinstance(d, dict):
            raise ConfigError(f"a model config must be a ModelConfig or a dict of its keys, got "
                              f"{type(d).__name__}")
        known = list(cls.__dataclass_fields__)
        unknown = [k for k in d if k not in known]
        if unknown:
            raise ConfigError(f"unknown config key(s) {', '.join(f'model.{k}' for k in unknown)}. "
                              f"Valid keys in model: {', '.join(known)}."
                              f"{did_you_mean(unknown[0], known)}")
        return cls(**d)

    def registry_parts(self) -> dict:
        """Check the registry names and ``*_kwargs`` of the positional scheme, the attention kind
        and the position sampler (the same checks as a config file's, :mod:`lengen.registry`),
        store the coerced kwargs, and return ``{section: (kind, name, class, framework
        arguments)}`` for :func:`lengen.config.check_components`."""
        fields_valid = self.checked()
        # a plugin is stored by its import path, so whatever rebuilds the run (resume, eval,
        # spawned sweep workers, Ray tasks) imports the same class without its entry point
        self.posenc = POSENC_POINT.canonical(self.posenc)
        self.attention = ATTENTION_POINT.canonical(self.attention)
        self.positions = SAMPLER_POINT.canonical(self.positions)
        parts = {  # section -> (registry kind, name, class, framework argument names)
            "model.posenc_kwargs": ("positional scheme", self.posenc,
                                    POSENC_POINT.get(self.posenc), self.posenc_args()),
            "model.attention_kwargs": ("attention kind", self.attention,
                                       ATTENTION_POINT.get(self.attention),
                                       self.attention_args(0)),
            "model.positions_kwargs": ("position sampler", self.positions,
                                       SAMPLER_POINT.get(self.positions), {}),
        }
        check_pair(parts["model.attention_kwargs"][2], self.attention,
                   parts["model.posenc_kwargs"][2], self.posenc)
        for section, (kind, name, cls, framework) in parts.items():
            sources = {k: FRAMEWORK_ARG_SOURCES.get(k, "the model") for k in framework}
            attr = section.split(".")[1]
            setattr(self, attr, check_kwargs(cls, getattr(self, attr), section=section, kind=kind,
                                             name=name, framework=sources))
        if fields_valid:                 # names canonical and kwargs coerced: valid as they are
            self._remember(registry=True)
        return parts


def acts_in_attention(posenc_cls) -> bool:
    """Whether a positional scheme acts inside attention: rotates q and k or adds a logit bias
    (rather than adding to the embeddings, or nothing)."""
    return bool(getattr(posenc_cls, "has_bias", False)) or (
        getattr(posenc_cls, "rotate", PositionalScheme.rotate) is not PositionalScheme.rotate)


def pair_refusal(attention_cls, posenc_cls, attention: str, posenc: str) -> str | None:
    """Why attention kind (or token mixer) ``attention`` cannot run with positional scheme
    ``posenc``, or None: a mixer (``uses_posenc = False``, :mod:`lengen.attention.mixer`) with a
    scheme that acts inside attention; a scheme that widens q/k (PoPE) with a kind that needs
    them as wide as the head (:func:`lengen.attention.wide_qk_refusal`)."""
    if not attention_cls.uses_posenc and acts_in_attention(posenc_cls):
        fit = ", ".join(n for n, c in POSENCS.items() if not acts_in_attention(c))
        return (f"model.attention='{attention}' is a token mixer (a recurrence with no queries "
                f"and keys) and cannot use model.posenc='{posenc}', a scheme that rotates q/k or "
                f"adds an attention bias. Valid model.posenc with a mixer: {fit} (schemes that "
                f"add to the embeddings, or nothing)")
    return wide_qk_refusal(posenc_cls, attention_cls, posenc, attention)


def combines(attention_cls, posenc_cls) -> bool:
    """Whether the attention kind (or token mixer) can run with the positional scheme (what the
    registry-driven tests iterate: every pair :func:`pair_refusal` does not refuse)."""
    return pair_refusal(attention_cls, posenc_cls, "", "") is None


def check_pair(attention_cls, attention: str, posenc_cls, posenc: str) -> None:
    """A ConfigError with :func:`pair_refusal`'s reason when the pair cannot run."""
    why = pair_refusal(attention_cls, posenc_cls, attention, posenc)
    if why:
        raise ConfigError(why)


#: where each argument of ``posenc_args`` / ``attention_args`` comes from (for error messages)
FRAMEWORK_ARG_SOURCES = {
    "d_model": "model.d_model", "n_heads": "model.n_heads",
    "head_dim": "model.d_model / model.n_heads", "causal": "model.causal",
    "impl": "model.attn_impl", "block_size": "model.attn_block_size",
    "layer_idx": "the layer's index (0 .. model.n_layers - 1)", "n_layers": "model.n_layers",
}


#: model_type -> how the architecture takes positions: ``rope`` (rotary, any real position) or
#: ``table`` (a learned table: integer positions below its size). Tested in
#: tests/test_hf_backbone.py; a new line here needs a test there.
HF_MODEL_TYPES = {"llama": "rope", "gpt2": "table"}
#: fields of lengen's own transformer, which must keep their defaults with backbone=hf
LENGEN_ONLY = ("mlp", "norm", "norm_position", "final_norm", "dropout", "tie_embeddings",
               "embed_scale", "causal", "posenc", "posenc_kwargs", "attention",
               "attention_kwargs", "attn_impl", "attn_block_size", "init_std", "init",
               "embed_dropout")
#: the sizes a Hugging Face backbone fills in from its config (lengen's memory estimates and
#: thread choice read them)
HF_SIZES = ("d_model", "n_layers", "n_heads", "d_ff")

#: the valid values of every ModelConfig field (declared with the fields)
MODEL_RULES = rules_of(ModelConfig)
_DEFAULTS = {f.name: (f.default_factory() if f.default_factory is not dataclasses.MISSING
                      else f.default) for f in dataclasses.fields(ModelConfig)}
