"""Experiment configuration: model + task + training + evaluation, as nested dataclasses.

Loaded from YAML or JSON, then patched with dotted overrides (``train.steps=500``,
``model.attention=tra``, ``model.attention_kwargs.qk_norm=false``). :func:`validate` checks,
*before* any training starts:

* every field against its rule (``TRAIN_RULES``, ``EVAL_RULES``, ``TASK_RULES``,
  ``lengen.model.config.MODEL_RULES``, read from the fields): ranges, choices, types;
* registry names (``model.posenc``, ``model.attention``, ``model.positions``, ``task.name``);
* every ``*_kwargs`` key against the chosen class's constructor (:mod:`lengen.checks`), then
  builds the task, the position sampler and the positional scheme, which the checks below need, so
  a constructor's complaint is reported with its config section; a sampler or scheme class with a
  classmethod ``task_defaults(kwargs, task)`` first gets to fill in keyword arguments only the task
  knows (the training length M of position interpolation), which are then saved with the config;
* the evaluation splits and that the longest input can be encoded.

:func:`resolve` returns the config with what validation built (:class:`Resolved`), and the run
takes that object (``lengen.train``, ``lengen.rundir.load.prepare``), so ``lengen train``
validates once and builds the task, the sampler and the scheme once. Attention layers are built
only by the model (one per layer, in the model's random stream): their constructors' complaints
come when ``prepare`` builds it, which is still before any file is written.

Every field of the config dataclasses is declared once, with its default, rule and doc
(:func:`lengen.checks.option`); the ``*_RULES`` tables are read from them.

Every error is a :class:`lengen.errors.ConfigError` naming the key or file and the fix.
"""
from __future__ import annotations

import copy
import importlib.util
import json
from dataclasses import MISSING, asdict, dataclass, field, fields, is_dataclass

import torch

from lengen.checks import (Bool, Choice, Device, Float, Int, IsA, Mapping, Seq, Str,
                           check_fields, did_you_mean, option, rules_of)
from lengen.errors import ArgumentError, ConfigError
from lengen.config_files import apply_overrides, load_config_file, parse_value  # noqa: F401
from lengen.model.config import ModelConfig
from lengen.model.hf_backbone import check_hf_model
from lengen.model.memory import check_fits
from lengen.registry import SEED_RULE, check_kwargs, construct, fill_from_task
from lengen.runtime import check_runtime
from lengen.posenc.base import PositionalScheme
from lengen.posenc import POSENC_POINT
from lengen.samplers.base import PositionSampler
from lengen.tasks import TASK_POINT
from lengen.tasks.base import Task, reads_with


SEED = SEED_RULE                  # one rule for every seed, config keys and registry kwargs
RUN_NAME = Str(r"[A-Za-z0-9._=+,@-]*", "a run name of letters, digits and . _ = + , @ -")
_SPLITS = "a non-empty list of distinct split names such as "

# every field is declared once: its default, its rule (the *_RULES tables below are read from
# the fields) and its doc (lengen.checks.option)


@dataclass
class TaskConfig:
    name: str = option("flipflop", Str(what="a task name (see `lengen list`)"),
                       "the task: a key of lengen.tasks.TASKS, a plugin name or an import path")
    kwargs: dict = option({}, Mapping(), "keyword arguments of the task")


@dataclass
class TrainConfig:
    steps: int = option(1000, Int(min=1), "optimizer steps")
    batch_size: int = option(32, Int(min=1), "sequences per step (over all data-parallel ranks)")
    lr: float = option(1e-3, Float(gt=0), "peak learning rate")
    weight_decay: float = option(0.1, Float(min=0), "AdamW weight decay")
    betas: tuple = option((0.9, 0.95), Seq(Float(min=0, lt=1), length=2, as_tuple=True,
                                           what="a pair [beta1, beta2] of numbers in [0, 1)"),
                          "Adam betas")
    eps: float = option(1e-8, Float(gt=0), "Adam epsilon")
    warmup_steps: int = option(100, Int(min=0), "linear warmup from 0")
    min_lr_frac: float = option(0.1, Float(min=0, max=1), "cosine decay ends at lr * min_lr_frac")
    schedule: str = option("cosine", Choice("cosine", "constant"), "cosine | constant")
    decay_all: bool = option(False, Bool(), "also decay norms, biases and embeddings")
    optimizer: str = option("adamw", Choice("adamw", "adam"),
                            "adamw | adam (Ruoss et al.: Adam, no decay)")
    grad_clip: float = option(1.0, Float(min=0), "max global grad norm (0 = off)")
    seed: int = option(0, SEED, "model initialisation, dropout, training positions")
    data_seed: int = option(0, SEED, "training data order (independent of init, Zhou et al.)")
    eval_every: int = option(0, Int(min=0), "steps between periodic evaluations; 0 = only at the "
                             "end")
    eval_sequences: int = option(256, Int(min=1), "per split during periodic evaluation")
    eval_splits: list | None = option(
        None, Seq(Str(what="a split name"), min_len=1, unique=True, scalar_ok=True, optional=True,
                  what=_SPLITS + "[len=10, len=20]"),
        "splits of the periodic evaluation (default: eval.splits)")
    ckpt_every: int = option(0, Int(min=0), "steps between checkpoints; 0 = only at the end (and "
                             "on interrupt)")
    keep_checkpoints: int = option(2, Int(min=0), "newest checkpoints kept (0 = keep all)")
    log_every: int = option(10, Int(min=0), "steps between loss lines in metrics.jsonl (0 = "
                            "none)")
    tensorboard: bool = option(False, Bool(), "also log to TensorBoard")
    wandb: bool = option(False, Bool(), "also log to Weights & Biases (lengen.train.wandb_log)")
    wandb_project: str = option("lengen", Str(r"[^/\\#?%:]{1,128}",
                                              "a W&B project name (1-128 characters, none of "
                                              "/ \\ # ? % :)"), "W&B project")
    wandb_name: str = option("", Str(r".{0,128}", "a W&B run name (at most 128 characters)"),
                             '"" = the experiment name, else the run directory\'s name')
    wandb_tags: list | None = option(
        None, Seq(Str(r".{1,64}", "a tag of 1-64 characters"), unique=True, scalar_ok=True,
                  optional=True, what="a list of distinct W&B tags such as [rope, copy]"),
        "W&B tags")
    progress: bool = option(True, Bool(), "a progress bar on stderr")
    device: str = option("cpu", Device(), "under torchrun: cpu (gloo) or cuda (NCCL, "
                         "cuda:LOCAL_RANK)")
    threads: int = option(0, Int(min=0, max=1024), "torch threads (at most lengen.threads.MAX_THREADS); 0 = lengen.threads chooses (1 if "
                          "small)")
    precision: str = option("fp32", Choice("fp32", "bf16", "fp16"),
                            "fp32 | bf16 | fp16 (autocast; fp16 with loss scaling)")
    compile: bool = option(False, Bool(), "torch.compile the training forward (from outside)")


@dataclass
class EvalConfig:
    # a bare string is one split (``eval.splits=iid``), never split into characters
    splits: list | None = option(
        None, Seq(Str(what="a split name"), min_len=1, unique=True, scalar_ok=True, optional=True,
                  what=_SPLITS + "[iid, sparse, dense]"),
        "evaluation splits (default: the task's splits)")
    sequences: int = option(1000, Int(min=1), "sequences per split")
    batch_size: int = option(64, Int(min=1), "memory only: results do not depend on it")
    seed: int = option(1234, SEED, "evaluation data seed (identical across runs)")


@dataclass
class ExperimentConfig:
    model: ModelConfig = option(None, IsA(ModelConfig), "the model", factory=ModelConfig)
    task: TaskConfig = option(None, IsA(TaskConfig), "the task", factory=TaskConfig)
    train: TrainConfig = option(None, IsA(TrainConfig), "training", factory=TrainConfig)
    eval: EvalConfig = option(None, IsA(EvalConfig), "the final evaluation", factory=EvalConfig)
    name: str = option("", RUN_NAME, "the experiment's name (default run directory runs/NAME)")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ExperimentConfig":
        return _build(cls, d, "")


# ---- rule tables: the valid values of every field (read from the fields) ----------------------

TASK_RULES = rules_of(TaskConfig)
TRAIN_RULES = rules_of(TrainConfig)
EVAL_RULES = rules_of(EvalConfig)
EXPERIMENT_RULES = rules_of(ExperimentConfig)


def defaults(cls=None) -> dict:
    """The defaults of a config dataclass as a plain dict (sections nested), without building
    one (a ModelConfig checks itself when made)."""
    cls = cls or ExperimentConfig
    out = {}
    for f in fields(cls):
        if f.default_factory is not MISSING:
            out[f.name] = (defaults(f.default_factory) if is_dataclass(f.default_factory)
                           else f.default_factory())
        else:
            out[f.name] = copy.deepcopy(f.default)
    return out


# ---- which keys may differ when a run directory is reused --------------------------------------

#: keys that change how a run executes or what it prints, never what it computes (the device and
#: compile change float rounding only; train.precision is a different computation and is compared)
RUNTIME_KEYS = ("train.threads", "train.progress", "train.device", "train.tensorboard",
                "train.log_every", "train.ckpt_every", "train.keep_checkpoints", "train.compile",
                "train.wandb", "train.wandb_project", "train.wandb_name", "train.wandb_tags")
#: keys a resumed training run may change: the runtime keys, plus those that only shape the final
#: evaluation (recomputed in full at the end) or when periodic evaluation happens (evaluation is
#: deterministic and never touches the training RNG). eval.seed, eval.splits and
#: train.eval_sequences / train.eval_splits are compared: they change the periodic values already
#: in metrics.jsonl.
RESUME_IGNORED = RUNTIME_KEYS + ("train.eval_every", "eval.sequences", "eval.batch_size", "name")


def _build(cls, d, prefix):
    if not isinstance(d, dict):
        if prefix:
            raise ConfigError(f"config section '{prefix[:-1]}' must be a mapping of keys, got "
                              f"{d!r}; write e.g. {prefix}<key>=<value> or a YAML section")
        raise ConfigError(f"the config must be a mapping with sections model, task, train, eval, "
                          f"got {type(d).__name__}")
    where = prefix[:-1] if prefix else "the config"
    known = {f.name: f for f in fields(cls)}
    unknown = [k for k in d if k not in known]
    if unknown:
        bad = unknown[0]
        raise ConfigError(
            f"unknown config key(s) {', '.join(prefix + str(k) for k in unknown)}. Valid keys in "
            f"{where}: {', '.join(known)}.{did_you_mean(bad, known)}")
    kwargs = {}
    for k, v in d.items():
        sub = _SECTIONS.get((cls, k))
        kwargs[k] = _build(sub, v, prefix + k + ".") if sub else v
    return cls(**kwargs)


_SECTIONS = {(ExperimentConfig, "model"): ModelConfig, (ExperimentConfig, "task"): TaskConfig,
             (ExperimentConfig, "train"): TrainConfig, (ExperimentConfig, "eval"): EvalConfig}


# ---- resolution and validation ------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class Resolved:
    """A validated experiment config and what validation built for it: the task, the position
    sampler and the positional scheme (layer 0's). What :func:`resolve` returns and what
    ``lengen.train``, ``lengen.rundir.load.prepare``, evaluation and sweeps take, so a run
    validates its config once and builds each component once.

    The model made from it gets its own copies of ``sampler`` and ``scheme`` (a model owns its
    modules: two runs prepared from one Resolved never share parameters); the ``task`` is shared
    and its reading state reset by each ``prepare``. ``fingerprint`` is ``config.to_dict()`` as
    validated: a ``config`` changed since (:meth:`changed`) is validated again by ``prepare``,
    not run with components built for other values."""
    config: ExperimentConfig
    task: Task
    sampler: PositionSampler
    scheme: PositionalScheme
    fingerprint: dict = field(repr=False)

    def changed(self) -> bool:
        """Whether ``config`` was changed since it was validated."""
        return self.config.to_dict() != self.fingerprint


def resolve(config: dict | None = None, overrides: list[str] | None = None, *,
            check_device: bool = True) -> Resolved:
    """Defaults <- config dict <- overrides, validated (see the module docstring): the config
    and its components (:class:`Resolved`). ``check_device=False`` skips the check that
    ``train.device`` exists on this machine (for reading a run trained elsewhere)."""
    if config is not None and not isinstance(config, dict):
        raise ConfigError(f"the config must be a mapping with sections model, task, train, eval, "
                          f"got {type(config).__name__}")
    if overrides is not None and not isinstance(overrides, (str, list, tuple)):
        raise ArgumentError(f"overrides must be a list of 'key.path=value' strings such as "
                            f"['train.steps=500'], got {type(overrides).__name__}")
    base = defaults()
    # model.d_ff defaults to 2 x the *merged* d_model (ModelConfig.__post_init__), not to 2 x the
    # default d_model: a config that sets only d_model must not inherit the default's MLP width;
    # likewise model.vocab_size: None here tells "left to the task" from a value the user chose,
    # which must not be replaced silently (see check_components)
    base["model"]["vocab_size"] = None
    merged = _deep_merge(base, config or {})
    merged = apply_overrides(merged, overrides or [])
    explicit = True
    if isinstance(merged.get("model"), dict) and merged["model"].get("vocab_size") is None:
        merged["model"]["vocab_size"], explicit = DEFAULT_VOCAB, False
    cfg = ExperimentConfig.from_dict(merged)
    return validate(cfg, check_device=check_device, vocab_explicit=explicit)


#: model.vocab_size when neither the config nor the task asks for more (the dataclass default)
DEFAULT_VOCAB = ModelConfig.__dataclass_fields__["vocab_size"].default


def vocab_error(vocab_size: int, task, name: str | None = None) -> ConfigError:
    """The error for a model.vocab_size the user set below the task's vocabulary."""
    name = name or getattr(task, "name", "?")
    return ConfigError(f"model.vocab_size={vocab_size} is smaller than the vocabulary of task "
                       f"'{name}' ({task.vocab_size} tokens, ids 0..{task.vocab_size - 1}): ids "
                       f">= {vocab_size} would have no embedding. Leave model.vocab_size out "
                       f"(lengen then takes the task's {task.vocab_size}) or set it to "
                       f"{task.vocab_size} or more")


def _deep_merge(a: dict, b: dict) -> dict:
    out = copy.deepcopy(a)
    for k, v in b.items():
        # kwargs dicts are replaced wholesale so a config can drop a default kwarg
        if isinstance(v, dict) and isinstance(out.get(k), dict) and not k.endswith("kwargs"):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


WANDB_MISSING = ('train.wandb=true needs Weights & Biases: pip install "lengen[wandb]" (or set '
                 'train.wandb=false)')


def validate(cfg: ExperimentConfig, *, check_device: bool = True,
             vocab_explicit: bool | None = None) -> Resolved:
    """Check everything that can be checked without training; returns ``cfg`` with the
    components built to check it (:class:`Resolved`).

    Coerces values in place (``"1e3"`` -> 1000, ``eval.splits=iid`` -> ``["iid"]``).
    ``model.vocab_size``: left unset, it becomes the larger of its default (8) and the task's
    vocabulary (so runs made before this rule keep their shapes); set by the user
    (``vocab_explicit``; by default, when it differs from 8) below the task's vocabulary, it is
    an error naming both values, never raised silently; set above it, it is kept (ids the task
    never uses, e.g. to share one vocabulary between tasks)."""
    if not isinstance(cfg, ExperimentConfig):
        raise ConfigError(f"expected an ExperimentConfig (from lengen.resolve), got "
                          f"{type(cfg).__name__}")
    check_fields(cfg, EXPERIMENT_RULES, "")
    if not cfg.model.checked():     # made (and so checked) by from_dict, unless changed since
        cfg.model.validate()
    check_fields(cfg.task, TASK_RULES, "task")
    check_fields(cfg.train, TRAIN_RULES, "train")
    check_fields(cfg.eval, EVAL_RULES, "eval")
    if check_device:
        check_runtime(cfg.train)
    if cfg.train.tensorboard:
        if importlib.util.find_spec("tensorboard") is None:
            raise ConfigError("train.tensorboard=true needs TensorBoard: pip install "
                              "'lengen[tensorboard]' (or set train.tensorboard=false)")
    if cfg.train.wandb:
        if importlib.util.find_spec("wandb") is None:
            raise ConfigError(WANDB_MISSING)
    if vocab_explicit is None:
        vocab_explicit = cfg.model.vocab_size != DEFAULT_VOCAB
    task, sampler, scheme = check_components(cfg, vocab_explicit=vocab_explicit)
    cfg.model.mark_checked()        # the model built from it checks nothing again
    return Resolved(cfg, task, sampler, scheme, cfg.to_dict())


def check_components(cfg: ExperimentConfig, *, vocab_explicit: bool = True):
    """Registry names, their keyword arguments, and the task, position sampler and positional
    scheme built once to check them; returns ``(task, sampler, scheme)``."""
    m = cfg.model
    parts = m.registry_parts()      # model.posenc / attention / positions and their kwargs
    cfg.task.name = TASK_POINT.canonical(cfg.task.name)
    parts["task.kwargs"] = ("task", cfg.task.name, TASK_POINT.get(cfg.task.name), {})
    cfg.task.kwargs = check_kwargs(parts["task.kwargs"][2], cfg.task.kwargs,
                                   section="task.kwargs", kind="task", name=cfg.task.name)
    checked = {"model.posenc_kwargs": m.posenc_kwargs, "model.attention_kwargs": m.attention_kwargs,
               "model.positions_kwargs": m.positions_kwargs, "task.kwargs": cfg.task.kwargs}

    def what(section):
        kind, name, _, _ = parts[section]
        key = {"task.kwargs": "task.name"}.get(section, section.removesuffix("_kwargs"))
        return f"{kind} '{name}' ({key}, {section}={checked[section]})"

    # attention layers are built only by the model (one per layer); what a kind declares about
    # itself is checked here, so resolve() and a sweep's up-front check refuse an encoder with a
    # causal-only kind (TRA, FoT, CoPE) without building one
    attention_cls = parts["model.attention_kwargs"][2]
    if attention_cls.requires_causal and not m.causal:
        raise ConfigError(f"cannot build {what('model.attention_kwargs')}: it is defined only for "
                          f"causal decoders, and model.causal is false (the task "
                          f"'{cfg.task.name}' or the config asks for an encoder); choose another "
                          f"model.attention (e.g. softmax) or a decoder task")
    # the weights alone must fit in this machine's memory (the model is built on the CPU): an
    # impossible size is refused here, not by the allocator in the middle of a build
    check_fits(m, batch=0, length=0, training=False, device="cpu",
               fix="Lower model.d_model / model.n_layers / model.d_ff")
    # build the components the checks need once, without touching the caller's RNG; the run
    # uses them (Resolved) instead of building its own
    with torch.random.fork_rng(devices=[]):
        task = construct(parts["task.kwargs"][2], cfg.task.kwargs, what=what("task.kwargs"))
        splits = cfg.eval.splits or task.splits()
        for key, names in (("eval.splits", splits), ("train.eval_splits",
                                                     cfg.train.eval_splits or [])):
            for split in names:
                try:
                    task.check_split(split)
                except ValueError as e:
                    raise ConfigError(f"{key}: {e}") from None
        # every split the run evaluates, at the end or periodically
        splits = list(dict.fromkeys(list(splits) + list(cfg.train.eval_splits or [])))
        for section in ("model.positions_kwargs", "model.posenc_kwargs"):
            # keyword arguments only the task knows (M for position interpolation, the original
            # length of RoPE scaling, the digit ids of coupling / Abacus), filled in and saved
            # with the config, so a run directory rebuilds the same component
            filled = fill_from_task(parts[section][2], checked[section], task, splits,
                                    what=what(section))
            checked[section] = filled
            setattr(m, section.split(".")[1], filled)
        # seeded: a constructor that draws (a plugin's) makes the same sampler and scheme
        # every time the config is validated (they are the run's)
        torch.default_generator.manual_seed(cfg.train.seed)
        sampler = construct(parts["model.positions_kwargs"][2], m.positions_kwargs,
                            what=what("model.positions_kwargs"))
        posenc = construct(parts["model.posenc_kwargs"][2], m.posenc_kwargs,
                           what=what("model.posenc_kwargs"), **m.posenc_args())
        schemes = [posenc]
        for i, lc in enumerate(m.layer_configs() if m.layers else []):   # model.layers' schemes
            if (lc.posenc, lc.posenc_kwargs) != (m.posenc, m.posenc_kwargs):
                schemes.append(construct(POSENC_POINT.get(lc.posenc), lc.posenc_kwargs,
                                         what=f"model.layers ({m._layer_key(i, 'posenc')})",
                                         **lc.posenc_args()))
            if i == 0:
                posenc = schemes[-1]     # layer 0's scheme is the one the model is handed
    if task.vocab_size > m.vocab_size:
        if vocab_explicit:
            raise vocab_error(m.vocab_size, task, cfg.task.name)
        m.vocab_size = task.vocab_size
    if m.backbone == "hf":        # sizes from hf_config, a decoder task, positions it can take
        check_hf_model(m, task, sampler, task.max_input_length(splits))
        check_fits(m, batch=0, length=0, training=False, device="cpu",
                   fix="Lower the sizes in model.hf_config")
    if not reads_with(task, m.causal):
        raise ConfigError(f"task '{cfg.task.name}' needs model.causal={str(task.causal).lower()} "
                          f"({'a causal decoder' if task.causal else 'a bidirectional encoder'}); "
                          f"set model.causal={str(task.causal).lower()}")
    try:
        for scheme in schemes:
            scheme.check_positions(sampler.max_position(task.max_input_length(splits)))
    except ConfigError:
        raise
    except ValueError as e:
        raise ConfigError(str(e)) from None
    for section, (kind, name, cls, _) in parts.items():
        hook = getattr(cls, "check_config", None)     # optional cross-section checks of a class
        if hook is not None:
            try:
                hook(cfg)
            except ConfigError:
                raise
            except ValueError as e:
                raise ConfigError(f"{kind} '{name}': {e}") from None
    return task, sampler, posenc


def config_diff(old: dict, new: dict, ignore=()) -> list[tuple[str, object, object]]:
    """``[(dotted key, old value, new value)]`` where two config dicts differ, skipping the keys
    in ``ignore`` (a key ending in ``.*`` ignores a whole section)."""
    def flat(d, prefix=""):
        out = {}
        for k, v in d.items():
            key = f"{prefix}{k}"
            if isinstance(v, dict):
                out.update(flat(v, key + "."))
            else:
                out[key] = v
        return out

    def ignored(key):
        return any(key == p or (p.endswith(".*") and key.startswith(p[:-1])) for p in ignore)

    a = flat(json.loads(json.dumps(old, default=str)))
    b = flat(json.loads(json.dumps(new, default=str)))
    # a key one side lacks counts as None: a field added to lengen later with default None
    # (e.g. train.eval_splits) does not make a run stored before it a different run
    return [(k, a.get(k, "(unset)"), b.get(k, "(unset)")) for k in sorted(set(a) | set(b))
            if not ignored(k) and a.get(k) != b.get(k)]


__all__ = ["ExperimentConfig", "TaskConfig", "TrainConfig", "EvalConfig", "Resolved", "resolve",
           "validate", "defaults", "vocab_error", "DEFAULT_VOCAB",
           "apply_overrides", "load_config_file", "parse_value", "config_diff",
           "TRAIN_RULES", "EVAL_RULES", "TASK_RULES", "EXPERIMENT_RULES", "RUNTIME_KEYS",
           "RESUME_IGNORED"]
