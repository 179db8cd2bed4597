"""Reading a run directory: build a config's task and model (:func:`prepare`), and load a
finished or checkpointed run for evaluation (:func:`load_run`). Below training, evaluation and
the analyses, which all read runs; :mod:`lengen.train.loop` writes them."""
from __future__ import annotations

import copy
import json
import os
import warnings

import torch

from lengen.checks import check_device_available
from lengen.consent import PluginImportRefused, untrusted_source
from lengen.config import (ExperimentConfig, Resolved, _deep_merge, config_diff, resolve,
                           validate)
from lengen.errors import ArgumentError, ConfigError, LengenWarning, RunDirError
from lengen.model import build_model
from lengen.rundir.checkpoint import (checkpoint_step, latest_checkpoint, list_checkpoints,
                                     load_weights, verify_final_weights)
from lengen.rundir.layout import check_run_dir


def as_resolved(cfg) -> Resolved:
    """What a run starts from: a :class:`Resolved` as given (validated again only if its config
    was changed since), an ExperimentConfig validated (in place, as ``lengen.config.validate``),
    a plain dict resolved (as ``lengen.resolve(d)``); the device is not checked here (the run
    checks the one it uses). Anything else is an ArgumentError naming what to pass."""
    if isinstance(cfg, Resolved):
        return validate(cfg.config, check_device=False) if cfg.changed() else cfg
    if isinstance(cfg, ExperimentConfig):
        return validate(cfg, check_device=False)
    if isinstance(cfg, dict):
        return resolve(cfg, check_device=False)
    raise ArgumentError(f"the config must be what lengen.resolve returns, an ExperimentConfig "
                        f"or a dict of sections model, task, train, eval, got "
                        f"{type(cfg).__name__}")


def as_experiment_config(cfg) -> ExperimentConfig:
    """The validated ExperimentConfig of anything :func:`as_resolved` takes."""
    return as_resolved(cfg).config


def prepare(cfg):
    """Task and model (seeded) of a run: ``cfg`` as :func:`as_resolved` takes it. The model gets
    copies of the sampler and scheme validation built (a model owns its modules, so two models
    prepared from one Resolved share no parameters; what their constructors drew is never kept:
    the model initialises every parameter), the task as built, its reading state reset to the
    start (``load_state_dict({})``) if a run read it, so nothing is built or validated twice."""
    r = as_resolved(cfg)
    if r.task.state_dict():         # read by an earlier run from the same Resolved
        r.task.load_state_dict({})
    torch.manual_seed(r.config.train.seed)
    model = build_model(r.config.model, posenc=copy.deepcopy(r.scheme),
                        sampler=copy.deepcopy(r.sampler))
    return r.task, model


def check_config_matches_checkpoints(run_dir: str, stored: dict) -> None:
    """Refuse a ``config.json`` whose model or task differs from the config the run's newest
    checkpoint recorded when it was written (``meta.json``): a hand-edited ``posenc: nope ->
    alibi`` would evaluate NoPE weights as ALiBi without a word. The evaluation settings may
    differ (a sweep re-evaluates a run with new ones)."""
    for ck in list_checkpoints(run_dir):
        try:
            with open(os.path.join(ck, "meta.json"), encoding="utf-8") as f:
                recorded = json.load(f).get("config")
        except (OSError, ValueError, AttributeError):
            continue
        if not isinstance(recorded, dict):
            continue
        # a key added to lengen since the checkpoint was written takes its default on both sides
        base = ExperimentConfig().to_dict()
        old, new = _deep_merge(base, recorded), _deep_merge(base, stored)
        diff = [d for d in config_diff({k: old.get(k) for k in ("model", "task")},
                                       {k: new.get(k) for k in ("model", "task")})]
        if diff:
            shown = "; ".join(f"{k}: {a!r} in the checkpoint, {b!r} in config.json"
                              for k, a, b in diff[:4])
            raise RunDirError(f"{os.path.join(run_dir, 'config.json')} does not describe the "
                              f"weights: it differs from the config recorded with checkpoint "
                              f"{os.path.relpath(ck, run_dir)} ({shown}), so the weights would "
                              f"be evaluated as another model. Restore config.json (the "
                              f"checkpoint's meta.json holds the original), or train a new run "
                              f"with the new settings")
        return                                   # the newest readable record decides


def load_run(run_dir: str, device="cpu"):
    """Load a finished (or checkpointed) run -> (cfg, task, model) ready for evaluation. A run
    whose training has not finished (no ``model.safetensors``) gets its newest usable checkpoint
    and a :class:`lengen.errors.LengenWarning` naming that step and ``train.steps``."""
    cfg, task, model, _ = load_run_at(run_dir, device)
    return cfg, task, model


def load_run_at(run_dir: str, device="cpu"):
    """:func:`load_run` plus the training step of the weights loaded: ``(cfg, task, model,
    step)`` (``train.steps`` for a finished run's ``model.safetensors``)."""
    run_dir = check_run_dir(run_dir)
    if not os.path.isdir(run_dir):
        raise RunDirError(f"run directory {run_dir} does not exist (or is not a directory); give "
                          f"a directory made by lengen train")
    cfg_path = os.path.join(run_dir, "config.json")
    if not os.path.isfile(cfg_path):
        raise RunDirError(f"{run_dir} is not a run directory: it has no config.json; give a "
                          f"directory made by lengen train")
    fix = "rerun lengen train with the same settings and --run-dir to rewrite it"
    try:
        with open(cfg_path, encoding="utf-8") as f:
            stored = json.load(f)
    except (ValueError, OSError) as e:
        raise RunDirError(f"{cfg_path} is unreadable ({type(e).__name__}: {e}); {fix}") from None
    check_device_available(device, "device")
    check_config_matches_checkpoints(run_dir, stored)
    # the stored config is data, not the user's typing: the plugin import paths it names are
    # imported only with the user's consent (lengen.consent)
    with untrusted_source(cfg_path):
        try:
            resolved = resolve(stored, check_device=False)
        except PluginImportRefused:
            raise
        except ConfigError as e:
            raise ConfigError(f"{cfg_path}: {e}") from None
        cfg = resolved.config
        task, model = prepare(resolved)
    weights = os.path.join(run_dir, "model.safetensors")
    step = cfg.train.steps
    if not os.path.exists(weights):
        ck = latest_checkpoint(run_dir)
        if ck is None:
            raise RunDirError(f"{run_dir} has no model.safetensors and no usable checkpoint; "
                              f"train it first (lengen train --run-dir {run_dir} ...)")
        weights = os.path.join(ck, "model.safetensors")
        step = checkpoint_step(ck) or 0
        # a checkpoint at train.steps holds the final weights (the run stopped before writing
        # model.safetensors): evaluating it is evaluating the trained model, no warning
        if step < cfg.train.steps:
            warnings.warn(f"{run_dir} has not finished training: using its checkpoint at step "
                          f"{step} of train.steps={cfg.train.steps} ("
                          f"{os.path.relpath(ck, run_dir)}; there is no model.safetensors yet). "
                          f"Rerun lengen train --run-dir {run_dir} with the same settings to "
                          f"finish it", LengenWarning, stacklevel=3)
    try:
        load_weights(model, weights)          # unreadable or another model's: said first
        if weights == os.path.join(run_dir, "model.safetensors"):
            verify_final_weights(run_dir)     # readable, but not the bytes training wrote
    except RunDirError as e:
        raise RunDirError(f"{e}; {fix}") from None
    return cfg, task, model.to(device).eval(), step


__all__ = ["as_resolved", "as_experiment_config", "prepare", "load_run", "load_run_at"]
