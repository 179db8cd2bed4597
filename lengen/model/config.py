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

import copy
import dataclasses
from dataclasses import asdict, dataclass

from lengen.attention import ATTENTION_POINT, ATTENTIONS, wide_qk_refusal
from lengen.checks import (Bool, Choice, Float, Int, Mapping, Seq, Str, check_fields,
                           did_you_mean, option, rules_of)
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
QK_NORMS = ("none", "rms")          # rms: x * rsqrt(mean(x^2) + eps) per head, no weight (Llama 4)
QK_NORM_PLACES = ("after_rope", "before_rope")
#: the keys a per-layer entry of ``model.layers`` may override (plus ``repeat``)
LAYER_KEYS = ("posenc", "posenc_kwargs", "attention", "attention_kwargs", "window", "chunk",
              "qk_norm", "qk_norm_position")


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
    window: int | None = option(None, Int(min=1, optional=True),
                                "sliding-window attention: query i sees keys j with i - window "
                                "< j <= i (causal kinds that declare supports_window: softmax)")
    chunk: int | None = option(None, Int(min=1, optional=True),
                               "chunked local attention (Llama 4's attention_chunk_size): query "
                               "i sees keys j <= i with j // chunk == i // chunk")
    qk_norm: str = option("none", Choice(*QK_NORMS),
                          "none | rms: q and k RMS-normalised per head without a weight "
                          "(Llama 4's L2Norm), for every attention kind (not token mixers)")
    qk_norm_position: str = option("after_rope", Choice(*QK_NORM_PLACES),
                                   "after_rope (Llama 4) | before_rope: where qk_norm acts")
    layers: list = option([], Seq(Mapping()),
                          "per-layer overrides, one mapping per layer of any of posenc, "
                          "posenc_kwargs, attention, attention_kwargs, window, chunk, qk_norm, "
                          "qk_norm_position; an entry's repeat: n stands for n copies; a list "
                          "shorter than n_layers that divides it repeats (docs/methods.md, "
                          "'Per-layer layouts'), e.g. [{chunk: 64, qk_norm: rms, repeat: 3}, "
                          "{posenc: nope}]")
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
        self._check_layers()
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

    # -- per-layer layouts (model.layers) ------------------------------------------------------
    def _check_layers(self) -> None:
        """Each entry of ``layers``: known keys, values checked by the model-level field's rule
        (errors name ``model.layers[i].key``), ``repeat`` a positive integer; the expanded list
        has n_layers entries or a length that divides n_layers (then it repeats)."""
        if self.layers and self.backbone != "lengen":
            raise ConfigError("model.layers applies only with model.backbone=lengen")
        for i, entry in enumerate(self.layers):
            for key, value in list(entry.items()):
                where = f"model.layers[{i}].{key}"
                if key == "repeat":
                    entry[key] = Int(min=1).check(value, where)
                    continue
                if key not in LAYER_KEYS:
                    raise ConfigError(f"unknown key {where}. Valid keys in a layer: "
                                      f"{', '.join(LAYER_KEYS)}, repeat."
                                      f"{did_you_mean(key, LAYER_KEYS)}")
                entry[key] = MODEL_RULES[key].check(value, where, _DEFAULTS[key])
        n = len(self._expanded())
        if n and self.n_layers % n:
            raise ConfigError(f"model.layers describes {n} layers (repeat counted), which neither "
                              f"equals nor divides model.n_layers={self.n_layers}; give one entry "
                              f"per layer, or a pattern whose length divides n_layers")
        for i in range(self.n_layers if n else 0):
            over = self.layer_overrides(i)
            if (over.get("window", self.window) is not None
                    and over.get("chunk", self.chunk) is not None):
                raise ConfigError(f"{self._layer_key(i, 'window')} and "
                                  f"{self._layer_key(i, 'chunk')} are both set; a layer is "
                                  f"either sliding-window or chunked")
        if self.window is not None and self.chunk is not None:
            raise ConfigError("model.window and model.chunk are both set; a layer is either "
                              "sliding-window or chunked (set one, or per layer in model.layers)")

    def _expanded(self) -> list:
        """``layers`` with ``repeat`` unrolled: [(index in layers, overrides)]."""
        out = []
        for i, entry in enumerate(self.layers):
            body = {k: v for k, v in entry.items() if k != "repeat"}
            out += [(i, body)] * int(entry.get("repeat", 1))
        return out

    def _layer_key(self, layer_idx: int, key: str) -> str:
        """The config key that sets ``key`` for layer ``layer_idx`` (for error messages)."""
        expanded = self._expanded()
        if expanded:
            i, body = expanded[layer_idx % len(expanded)]
            if key in body:
                return f"model.layers[{i}].{key}"
        return f"model.{key}"

    def layer_overrides(self, layer_idx: int) -> dict:
        """What ``layers`` sets for layer ``layer_idx`` (empty without ``layers``)."""
        expanded = self._expanded()
        return dict(expanded[layer_idx % len(expanded)][1]) if expanded else {}

    def layer_config(self, layer_idx: int) -> "ModelConfig":
        """The model config of one layer: the model-level fields with the layer's overrides
        (and no ``layers``). Without ``layers`` the config itself."""
        if not self.layers:
            return self
        over = copy.deepcopy(self.layer_overrides(layer_idx))
        return dataclasses.replace(self, layers=[], **over)

    def layer_configs(self) -> list:
        """:meth:`layer_config` of every layer, in order."""
        return [self.layer_config(i) for i in range(self.n_layers)]

    # -- arguments the model passes to registry classes itself (never from *_kwargs) ------------
    def posenc_args(self) -> dict:
        """Keyword arguments every positional scheme receives from the model."""
        return dict(d_model=self.d_model, n_heads=self.n_heads,
                    head_dim=self.d_model // self.n_heads, causal=self.causal)

    def attention_args(self, layer_idx: int) -> dict:
        """Keyword arguments every attention kind receives from the model (per layer)."""
        args = dict(d_model=self.d_model, n_heads=self.n_heads, causal=self.causal,
                    impl=self.attn_impl, block_size=self.attn_block_size, layer_idx=layer_idx,
                    n_layers=self.n_layers)
        lc = self.layer_config(layer_idx)
        # the local masks and q/k norm reach the kind only when set (lengen.attention.base),
        # so a plugin kind that knows nothing of them keeps working
        for key, default in (("window", None), ("chunk", None), ("qk_norm", "none")):
            if getattr(lc, key) != default:
                args[key] = getattr(lc, key)
        if lc.qk_norm != "none" and lc.qk_norm_position != "after_rope":
            args["qk_norm_position"] = lc.qk_norm_position
        return args

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
        arguments)}`` for :func:`lengen.config.check_components` (the model-level ones). Each
        entry of ``layers`` is checked the same way (errors name ``model.layers[i].key``), then
        every layer's window, chunk and qk_norm against its kind (:func:`layer_refusal`)."""
        fields_valid = self.checked()
        parts = self._registry_parts("model.")
        for i, entry in enumerate(self.layers):
            over = {k: v for k, v in entry.items() if k != "repeat"}
            if not over:
                continue
            lc = dataclasses.replace(self, layers=[], **copy.deepcopy(over))
            lc._registry_parts(f"model.layers[{i}].")
            for k in over:                   # canonical names, coerced kwargs
                entry[k] = getattr(lc, k)
        self._check_layout()
        if fields_valid:                 # names canonical and kwargs coerced: valid as they are
            self._remember(registry=True)
        return parts

    def _registry_parts(self, prefix: str) -> dict:
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
            setattr(self, attr, check_kwargs(cls, getattr(self, attr),
                                             section=prefix + attr, kind=kind, name=name,
                                             framework=sources))
        return parts

    def _check_layout(self) -> None:
        """Every layer's window / chunk / qk_norm against its attention kind
        (:func:`layer_refusal`), and one embedding hook for the model: a scheme that adds to the
        embeddings (sin/cos, learned) is the model's, so the layers may not disagree on the
        scheme when one of them is such a scheme."""
        configs = self.layer_configs() if self.layers else [self]
        for i, lc in enumerate(configs):
            why = layer_refusal(ATTENTION_POINT.get(lc.attention), lc,
                                lambda key, i=i: self._layer_key(i, key))
            if why:
                raise ConfigError(why)
        schemes = {(lc.posenc, repr(sorted(lc.posenc_kwargs.items()))) for lc in configs}
        adds = [lc.posenc for lc in configs
                if POSENC_POINT.get(lc.posenc).embed is not PositionalScheme.embed]
        if len(schemes) > 1 and adds:
            raise ConfigError(f"model.layers: positional scheme '{adds[0]}' adds to the "
                              f"embeddings once for the whole model, so every layer must use it "
                              f"(with the same posenc_kwargs) or none may; the layers name "
                              f"{', '.join(sorted({s for s, _ in schemes}))}. Use schemes that "
                              f"act inside attention (rope, alibi, nope, ...) per layer")


def layer_refusal(attention_cls, lc: "ModelConfig", key=lambda k: f"model.{k}") -> str | None:
    """Why a layer's ``window`` / ``chunk`` / ``qk_norm`` cannot run with its attention kind, or
    None. ``key(name)`` gives the config key that set ``name`` (for the message). A causal-only
    kind (TRA, FoT, CoPE ...) needs a decoder, whichever layer names it. Local masks
    need a causal kind declaring ``supports_window``; q/k norm needs queries and keys (not a
    token mixer) and is TRA's own ``attention_kwargs.qk_norm`` there."""
    if attention_cls.requires_causal and not lc.causal:
        return (f"{key('attention')}='{lc.attention}' is defined only for causal decoders, and "
                f"model.causal is false (the task or the config asks for an encoder); choose "
                f"another attention kind for that layer, or a decoder task")
    for name in ("window", "chunk"):
        if getattr(lc, name) is None:
            continue
        if not getattr(attention_cls, "supports_window", False):
            ok = ", ".join(n for n, c in ATTENTIONS.items() if getattr(c, "supports_window", False))
            return (f"{key(name)}={getattr(lc, name)}: attention kind '{lc.attention}' has no "
                    f"{'sliding-window' if name == 'window' else 'chunked'} mask; kinds with "
                    f"one: {ok}")
        if not lc.causal:
            return (f"{key(name)}={getattr(lc, name)} needs a causal decoder (model.causal=true)"
                    f": the mask keeps keys j <= i")
    if lc.qk_norm != "none":
        if attention_cls.is_token_mixer:
            return (f"{key('qk_norm')}={lc.qk_norm}: attention kind '{lc.attention}' is a token "
                    f"mixer with no queries and keys; use qk_norm=none there")
        if attention_cls is ATTENTIONS.get("tra"):
            return (f"{key('qk_norm')}={lc.qk_norm}: TRA normalises q and k itself "
                    f"(model.attention_kwargs.qk_norm, default true); leave model qk_norm at "
                    f"none with tra")
    return None


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
    "window": "model.window (or model.layers[i].window)",
    "chunk": "model.chunk (or model.layers[i].chunk)",
    "qk_norm": "model.qk_norm (or model.layers[i].qk_norm)",
    "qk_norm_position": "model.qk_norm_position",
}


#: model_type -> how the architecture takes positions: ``rope`` (rotary, any real position) or
#: ``table`` (a learned table: integer positions below its size). Tested in
#: tests/test_hf_backbone.py; a new line here needs a test there.
HF_MODEL_TYPES = {"llama": "rope", "gpt2": "table"}
#: fields of lengen's own transformer, which must keep their defaults with backbone=hf
LENGEN_ONLY = ("mlp", "norm", "norm_position", "final_norm", "dropout", "tie_embeddings",
               "embed_scale", "causal", "posenc", "posenc_kwargs", "attention", "window", "chunk",
               "qk_norm", "qk_norm_position", "layers",
               "attention_kwargs", "attn_impl", "attn_block_size", "init_std", "init",
               "embed_dropout")
#: the sizes a Hugging Face backbone fills in from its config (lengen's memory estimates and
#: thread choice read them)
HF_SIZES = ("d_model", "n_layers", "n_heads", "d_ff")

#: the valid values of every ModelConfig field (declared with the fields)
MODEL_RULES = rules_of(ModelConfig)
_DEFAULTS = {f.name: (f.default_factory() if f.default_factory is not dataclasses.MISSING
                      else f.default) for f in dataclasses.fields(ModelConfig)}
