"""Experiment configuration: model + task + training + evaluation, as nested dataclasses.

Loaded from YAML or JSON, then patched with dotted overrides (``train.steps=500``,
``model.attention=tra``, ``model.attention_kwargs.qk_norm=false``). Unknown keys and unknown
registry names are rejected with the list of valid ones *before* any training starts.
"""
from __future__ import annotations

import copy
import json
import os
from dataclasses import asdict, dataclass, field, fields

import yaml

from lengen.model.config import ModelConfig


@dataclass
class TaskConfig:
    name: str = "flipflop"
    kwargs: dict = field(default_factory=dict)


@dataclass
class TrainConfig:
    steps: int = 1000
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 0.1
    betas: tuple = (0.9, 0.95)
    eps: float = 1e-8
    warmup_steps: int = 100           # linear warmup from 0
    min_lr_frac: float = 0.1          # cosine decay ends at lr * min_lr_frac
    schedule: str = "cosine"          # cosine | constant
    decay_all: bool = False           # also decay norms, biases and embeddings
    optimizer: str = "adamw"          # adamw | adam (Ruoss et al.: Adam, no decay)
    grad_clip: float = 1.0            # max global grad norm (0 = off)
    seed: int = 0                     # model initialisation
    data_seed: int = 0                # training data order (independent of init, Zhou et al.)
    eval_every: int = 0               # 0 = only at the end
    eval_sequences: int = 256         # per split during periodic evaluation
    ckpt_every: int = 0               # 0 = only at the end (and on interrupt)
    keep_checkpoints: int = 2
    log_every: int = 10
    tensorboard: bool = False
    progress: bool = True
    device: str = "cpu"
    threads: int = 0                  # torch.set_num_threads; 0 = leave as is


@dataclass
class EvalConfig:
    splits: list | None = None        # default: the task's splits
    sequences: int = 1000             # per split
    batch_size: int = 64
    seed: int = 1234                  # evaluation data seed (identical across runs)


@dataclass
class ExperimentConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    name: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ExperimentConfig":
        return _build(cls, d, "")


def _build(cls, d, prefix):
    if not isinstance(d, dict):
        raise ValueError(f"config section '{prefix or 'root'}' must be a mapping, got {d!r}")
    known = {f.name: f for f in fields(cls)}
    unknown = set(d) - set(known)
    if unknown:
        raise ValueError(f"unknown config key(s) {', '.join(prefix + k for k in sorted(unknown))}. "
                         f"Valid keys{' in ' + prefix[:-1] if prefix else ''}: {', '.join(known)}")
    kwargs = {}
    for k, v in d.items():
        sub = _SECTIONS.get((cls, k))
        kwargs[k] = _build(sub, v, prefix + k + ".") if sub else _coerce(v, known[k].type, prefix + k)
    if "betas" in kwargs:
        kwargs["betas"] = tuple(kwargs["betas"])
    return cls(**kwargs)


def _coerce(value, type_name, key):
    """Coerce scalars to the field's declared type: YAML reads ``3e-3`` as a string (YAML 1.1
    needs a dot), and a float given for an int field must be integral."""
    t = str(type_name).split("|")[0].strip()
    if value is None:
        return value
    try:
        if t == "float" and not isinstance(value, bool):
            return float(value)
        if t == "int" and not isinstance(value, bool):
            as_float = float(value)
            if not as_float.is_integer():
                raise ValueError
            return int(as_float)
    except (TypeError, ValueError):
        raise ValueError(f"config key {key} expects {t}, got {value!r}") from None
    if t == "bool" and not isinstance(value, bool):
        raise ValueError(f"config key {key} expects true/false, got {value!r}")
    return value


_SECTIONS = {(ExperimentConfig, "model"): ModelConfig, (ExperimentConfig, "task"): TaskConfig,
             (ExperimentConfig, "train"): TrainConfig, (ExperimentConfig, "eval"): EvalConfig}


def parse_value(text: str):
    """Parse an override value as YAML (numbers, booleans, lists, dicts), else keep the string."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def apply_overrides(d: dict, overrides: list[str]) -> dict:
    """``["train.steps=10", "model.attention=tra"]`` -> patched deep copy of ``d``."""
    d = copy.deepcopy(d)
    for item in overrides:
        if "=" not in item:
            raise ValueError(f"override '{item}' must look like key.path=value")
        path, value = item.split("=", 1)
        keys = path.strip().split(".")
        node = d
        for key in keys[:-1]:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ValueError(f"override '{item}': '{key}' is not a section")
        node[keys[-1]] = parse_value(value)
    return d


def load_config_file(path: str) -> dict:
    with open(path) as f:
        text = f.read()
    data = json.loads(text) if path.endswith(".json") else yaml.safe_load(text)
    return data or {}


def resolve(config: dict | None = None, overrides: list[str] | None = None) -> ExperimentConfig:
    """Defaults <- config dict <- overrides, validated (including registry names)."""
    base = ExperimentConfig().to_dict()
    merged = _deep_merge(base, config or {})
    merged = apply_overrides(merged, overrides or [])
    cfg = ExperimentConfig.from_dict(merged)
    validate(cfg)
    return cfg


def _deep_merge(a: dict, b: dict) -> dict:
    out = copy.deepcopy(a)
    for k, v in b.items():
        # kwargs dicts are replaced wholesale so a config can drop a default kwarg
        if isinstance(v, dict) and isinstance(out.get(k), dict) and not k.endswith("kwargs"):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def validate(cfg: ExperimentConfig) -> None:
    """Check registry names now, so a typo never costs a training run."""
    from lengen.attention import ATTENTIONS
    from lengen.positions import SAMPLERS
    from lengen.posenc import POSENCS
    from lengen.registry import lookup
    from lengen.tasks import TASKS

    lookup(POSENCS, cfg.model.posenc, "positional scheme")
    lookup(ATTENTIONS, cfg.model.attention, "attention kind")
    lookup(SAMPLERS, cfg.model.positions, "position sampler")
    lookup(TASKS, cfg.task.name, "task")
    if cfg.train.schedule not in ("cosine", "constant"):
        raise ValueError(f"unknown train.schedule '{cfg.train.schedule}'. Valid: cosine, constant")
    if cfg.train.optimizer not in ("adamw", "adam"):
        raise ValueError(f"unknown train.optimizer '{cfg.train.optimizer}'. Valid: adamw, adam")


def save_json_atomic(obj, path: str) -> None:
    """Write JSON through a temporary file and rename, so readers never see a partial file."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, default=str)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
