"""Operations on existing run directories: evaluate a run's weights again (``lengen eval``) and
re-evaluate a finished run with new evaluation settings without retraining (sweeps); and
evaluate a local Hugging Face checkpoint on lengen's tasks the same way (``lengen eval --hf``). Both hold the
run directory's lock while they run. ``load_run`` (:mod:`lengen.rundir.load`) reads a run.
Above evaluation and the analyses (it draws the accuracy-vs-length plot of what it evaluated)
and beside training, which never imports it: plots are drawn by callers, not by the loop.
"""
from __future__ import annotations

import json
import os
from contextlib import nullcontext

import torch

from lengen.analysis.length_curves import plot_task_sweep
from lengen.analysis.perplexity_plot import plot_perplexity
from lengen.checks import Int, Str, check_device_available
from lengen.config import SEED, EvalConfig, ExperimentConfig
from lengen.data.tokenizers import has_hf_tokenizer
from lengen.fileio import make_output_dir, save_json_atomic
from lengen.errors import ConfigError
from lengen.registry import check_kwargs, construct, fill_from_task
from lengen.tasks import TASK_POINT
from lengen.eval.evaluate import check_evaluation_work, evaluate, sequences_evaluated
from lengen.eval.perplexity import eval_logits_at_once
from lengen.model.memory import check_fits
from lengen.rundir.checkpoint import load_weights, verify_final_weights
from lengen.threads import use_threads
from lengen.rundir.load import as_resolved, load_run_at, prepare
from lengen.rundir.layout import (RunDirLock, check_run_dir, check_same_run, refuse_owned_output,
                                 run_meta, write_rows)
from lengen.samplers import SAMPLER_POINT


def evaluate_run(run_dir: str, *, splits=None, sequences: int | None = None,
                 batch_size: int | None = None, seed: int | None = None, device="cpu",
                 out: str = "reeval", progress: bool = False, plot: bool = True,
                 positions: str | None = None, positions_kwargs: dict | None = None,
                 columns: dict | None = None, threads: int = 0) -> list[dict]:
    """Evaluate a run directory's weights (the run's eval settings unless given) and write
    ``RUN_DIR/<out>.json`` and ``.csv`` (and ``<out>.png``, accuracy vs length, when ``plot`` and
    the splits are two or more ``len=K`` lengths). Holds the run directory's lock while it runs.

    ``out`` defaults to ``reeval``: the run's own ``eval.json`` / ``eval.csv`` are the record of
    training (written by :func:`lengen.train.train` with the step they were taken at, read by
    sweeps to tell a finished run) and are never replaced here; an ``out`` naming any file lengen
    owns in the run directory (``config``, ``metrics``, ``model``, ``eval`` ...) is refused
    (:func:`lengen.rundir.layout.refuse_owned_output`).

    ``positions`` / ``positions_kwargs``: evaluate with another position sampler than the one the
    run was trained with (samplers hold no weights), e.g. a RoPE model trained on positions
    0..T-1 evaluated with position interpolation; the rows' ``positions`` column names it. Use
    another ``out`` stem so the run's own ``eval.json`` is kept. ``columns``: extra values added
    to every row before it is written (e.g. a stamp saying which evaluation this is).

    Rows carry the ``step`` of the weights evaluated, as training's rows do; a run whose
    training has not finished is evaluated at its newest checkpoint with a
    :class:`lengen.errors.LengenWarning` saying so (see :func:`lengen.train.loop.load_run`).
    ``threads``: torch threads (0: :func:`lengen.threads.choose_threads`'s choice for the model)."""
    for key, value in (("sequences", sequences), ("batch_size", batch_size)):
        if value is not None:
            Int(min=1).check(value, key)
    Int(min=0).check(threads, "threads")
    if seed is not None:
        SEED.check(seed, "seed")
    Str(r"[A-Za-z0-9_][A-Za-z0-9._-]*", "a file name stem such as reeval or ood").check(out, "out")
    run_dir = check_run_dir(run_dir)
    refuse_owned_output(os.path.join(run_dir, out), "--out", shown=out, stem=True)
    if columns is not None and not isinstance(columns, dict):
        raise ConfigError(f"columns must be a dict of extra row values, got "
                          f"{type(columns).__name__}")
    # lock only an existing directory (load_run reports a missing one; never create it here)
    if positions_kwargs is not None and positions is None:
        raise ConfigError("positions_kwargs needs positions (the sampler they are for)")
    with RunDirLock(run_dir, "evaluation") if os.path.isdir(run_dir) else nullcontext():
        cfg, task, model, step = load_run_at(run_dir, device=device)
        use_threads(threads, cfg.model.d_model, device)
        if isinstance(splits, str):
            splits = [splits]
        splits = list(splits or cfg.eval.splits or task.splits())
        for split in splits:
            try:
                task.check_split(split)
            except ValueError as e:
                raise ConfigError(str(e)) from None
        if positions is not None:
            model.sampler, kwargs = build_sampler_checked(positions, positions_kwargs or {},
                                                          task=task, splits=splits)
            cfg.model.positions, cfg.model.positions_kwargs = positions, kwargs
        rows = _evaluate_and_write(
            model, cfg.model, task, splits, sequences=sequences or cfg.eval.sequences,
            batch_size=batch_size or cfg.eval.batch_size,
            seed=cfg.eval.seed if seed is None else seed, device=device,
            meta={**run_meta(cfg, run_dir), "step": step, **(columns or {})}, progress=progress,
            stem=os.path.join(run_dir, out), plot=plot)
    return rows


def _evaluate_and_write(model, mc, task, splits, *, sequences: int, batch_size: int, seed: int,
                        device, meta: dict, progress: bool, stem: str, plot: bool) -> list[dict]:
    """Evaluate ``model`` (model config ``mc``) on ``splits`` and write ``<stem>.json`` /
    ``.csv`` (and ``<stem>.png`` with ``plot``); what cannot be encoded, fit in memory or finish
    in reasonable time is refused before the first batch."""
    try:
        model.check_length(task.max_input_length(splits))
    except ValueError as e:
        raise ConfigError(str(e)) from None
    length = task.max_input_length(splits)
    bs = min(batch_size, sequences_evaluated(task, sequences, length))   # at the longest split
    check_fits(mc, batch=bs, length=length, training=False, device=device, weights_held=True,
               logits_at_once=eval_logits_at_once(task, mc.vocab_size),
               sizes=f"batch size {bs} (--batch-size), inputs of {length} tokens (the longest "
                     f"of the splits)",
               fix="Lower --batch-size, or evaluate the longest splits separately")
    check_evaluation_work(mc, task, splits, sequences, device=device,
                          what=f"evaluating {len(splits)} split(s) x {sequences} sequences "
                               f"(--sequences)",
                          fix="Lower --sequences or drop the longest --splits")
    rows = evaluate(model, task, splits, n_sequences=sequences, batch_size=batch_size, seed=seed,
                    device=device, meta=meta, progress=progress)
    folder, name = os.path.split(stem)
    write_rows(rows, folder, stem=name)
    if plot and getattr(task, "evaluation", "accuracy") == "perplexity":
        if len(splits) >= 2:                # perplexity vs length (text)
            plot_perplexity(rows, f"{stem}.png", train_length=task.train_input_length(),
                            title=f"{task.name}: perplexity vs length")
    elif plot:
        plot_task_sweep(rows, task, f"{stem}.png")
    return rows


#: the file stem ``lengen eval --hf`` writes in its --out folder (eval.json / .csv / .png, as a
#: run's own evaluation)
HF_EVAL_STEM = "eval"


def evaluate_hf(path: str, task: str, out: str, *, task_kwargs: dict | None = None, splits=None,
                sequences: int | None = None, batch_size: int | None = None,
                seed: int | None = None, device="cpu", positions: str | None = None,
                positions_kwargs: dict | None = None, rope_scaling: dict | None = None,
                progress: bool = False, plot: bool = True, threads: int = 0) -> list[dict]:
    """``lengen eval --hf PATH --task NAME --out DIR``: evaluate a local Hugging Face checkpoint
    (:func:`lengen.hf.load.load_checkpoint`, offline) on lengen task ``task`` (``task_kwargs``)
    exactly as a run is evaluated (accuracy per length for the decoder tasks, perplexity per
    length for ``text``), writing ``DIR/eval.json`` / ``.csv`` (and ``.png``). Refused when DIR
    holds a run (or is the checkpoint itself, whose config.json / model.safetensors are a run's
    names).

    ``rope_scaling``: transformers' own RoPE scaling applied to the loaded config; ``positions``
    / ``positions_kwargs``: a lengen position sampler (filled in from the task as in training).
    The task's ids must lie inside the checkpoint's vocabulary: lengen's decoder tasks have small
    vocabularies of their own, so the natural checkpoint is one trained on the task (a
    ``model.backbone=hf`` run exported with ``lengen export RUN OUT --to hf``, or a lengen run
    exported with ``--to llama``). ``text``: the checkpoint's own tokenizer when PATH has one and
    ``task_kwargs`` names none (``tokenizer: hf``), else ``task_kwargs.tokenizer`` is required."""
    try:
        from lengen.hf.load import load_checkpoint  # optional dependency (transformers)
    except ImportError:
        raise ConfigError('lengen eval --hf needs Hugging Face transformers: pip install '
                          '"lengen[hf]"') from None

    ec = EvalConfig()
    for key, value in (("sequences", sequences), ("batch_size", batch_size)):
        if value is not None:
            Int(min=1).check(value, key)
    Int(min=0).check(threads, "threads")
    seed = ec.seed if seed is None else SEED.check(seed, "seed")
    if positions_kwargs is not None and positions is None:
        raise ConfigError("--positions-kwargs needs --positions (the sampler they are for)")
    if positions is not None and rope_scaling is not None:
        raise ConfigError("give --rope-scaling (transformers' RoPE scaling) or --positions (a "
                          "lengen sampler), not both")
    refuse_owned_output(os.path.join(out, HF_EVAL_STEM), "--out", shown=out, stem=True,
                        example="hf-eval")
    # the task, its kwargs checked as a config's task section is
    name = TASK_POINT.canonical(task)
    cls = TASK_POINT.get(name)
    kwargs = dict(task_kwargs or {})
    if name == "text" and "tokenizer" not in kwargs:
        if not has_hf_tokenizer(path):
            raise ConfigError(f"--task text: {path} has no tokenizer (tokenizer.json / "
                              f"tokenizer_config.json); name one of lengen's whose ids the "
                              f"checkpoint was trained on, e.g. --task-kwargs "
                              f"'{{\"tokenizer\": \"bytes\"}}'")
        kwargs.update(tokenizer="hf", tokenizer_kwargs={"path": path})
    kwargs = check_kwargs(cls, kwargs, section="task.kwargs", kind="task", name=name)
    task_obj = construct(cls, kwargs, what=f"task '{name}' (--task, --task-kwargs={kwargs})")
    splits = [splits] if isinstance(splits, str) else list(splits or task_obj.splits())
    for split in splits:
        try:
            task_obj.check_split(split)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    if not task_obj.causal:
        raise ConfigError(f"task '{name}' is an encoder task; a Hugging Face causal LM is "
                          f"evaluated on decoder tasks (copy, reverse, sort, summation, addition, "
                          f"flipflop, text)")
    model = load_checkpoint(path, rope_scaling=rope_scaling, device=device)
    mc = model.cfg
    if task_obj.vocab_size > mc.vocab_size:
        raise ConfigError(f"task '{name}' uses ids 0..{task_obj.vocab_size - 1}, but the "
                          f"checkpoint in {path} has a vocabulary of {mc.vocab_size}: its ids "
                          f"mean other tokens. lengen's decoder tasks have small vocabularies of "
                          f"their own; evaluate a checkpoint trained on this task (a "
                          f"model.backbone=hf run, lengen export RUN OUT --to hf), or for "
                          f"--task text name the tokenizer the checkpoint was trained with")
    check_checkpoint_task(path, name, task_obj, mc.vocab_size)
    if positions is not None:
        sampler, pkw = build_sampler_checked(positions, positions_kwargs or {}, task=task_obj,
                                             splits=splits)
        if hasattr(model.posenc, "check_sampler"):       # a Hugging Face backbone's table
            model.posenc.check_sampler(sampler, positions, key="--positions")
        model.sampler = sampler
        mc.positions, mc.positions_kwargs = positions, pkw
    use_threads(threads, mc.d_model, device)
    kind = mc.hf_config.get("model_type", "lengen") if mc.backbone == "hf" else "lengen"
    meta = {"run": os.path.basename(os.path.normpath(path)), "task": name,
            "pe": f"hf:{kind}" if mc.backbone == "hf" else mc.posenc,
            "attention": f"hf:{kind}" if mc.backbone == "hf" else mc.attention,
            "positions": mc.positions, "seed": None, "data_seed": None, "step": None,
            "checkpoint": os.path.abspath(path),
            "rope_scaling": None if rope_scaling is None else json.dumps(rope_scaling)}
    make_output_dir(out)
    return _evaluate_and_write(model, mc, task_obj, splits, sequences=sequences or ec.sequences,
                               batch_size=batch_size or ec.batch_size, seed=seed, device=device,
                               meta=meta, progress=progress,
                               stem=os.path.join(out, HF_EVAL_STEM), plot=plot)


def check_checkpoint_task(path: str, name: str, task, vocab_size: int) -> None:
    """Refuse scoring a checkpoint on a task it was not trained on: a lengen export records its
    task (``lengen_task`` in config.json) and must be evaluated on that task; and a decoder task
    with its own small vocabulary (every task but ``text``) needs a checkpoint of exactly that
    vocabulary (a copy checkpoint, 104 ids, scored on flip-flop, 5 ids, gives numbers that mean
    nothing)."""
    from lengen.hf.load import checkpoint_config  # optional dependency (transformers)

    recorded = getattr(checkpoint_config(path), "lengen_task", None) or {}
    trained = recorded.get("name") if isinstance(recorded, dict) else None
    if trained and TASK_POINT.canonical(trained) != name:
        raise ConfigError(f"--hf {path} was trained on task {trained!r} (lengen_task in its "
                          f"config.json), not on --task {name}: its outputs mean {trained}'s "
                          f"tokens. Evaluate it with --task {trained}")
    if name != "text" and task.vocab_size < vocab_size:
        raise ConfigError(f"task '{name}' has {task.vocab_size} token ids, but the checkpoint in "
                          f"{path} has a vocabulary of {vocab_size}: it was trained on another "
                          f"task, and its scores here would mean nothing. Evaluate it on the "
                          f"task it was trained on (lengen's decoder tasks each have their own "
                          f"vocabulary)")


def build_sampler_checked(name: str, kwargs: dict, *, task, splits):
    """(sampler, its kwargs): a position sampler from its registry name and keyword arguments,
    checked as a config's ``model.positions`` / ``model.positions_kwargs`` are (ConfigError
    naming the key and fix), with what only the task knows filled in as training does
    (:func:`lengen.registry.fill_from_task`); the returned kwargs include it."""
    cls = SAMPLER_POINT.get(name, "positions")
    kwargs = check_kwargs(cls, kwargs, section="positions_kwargs", kind="position sampler",
                          name=name)
    kwargs = fill_from_task(cls, kwargs, task, splits, what=f"position sampler '{name}'")
    sampler = construct(cls, kwargs, what=f"position sampler '{name}' (positions_kwargs={kwargs})")
    return sampler, kwargs


def reevaluate(cfg: ExperimentConfig, run_dir: str, *, quiet: bool = True) -> list[dict]:
    """Evaluate a finished run's final weights (``model.safetensors``) with ``cfg``'s evaluation
    settings, and rewrite ``eval.json`` / ``eval.csv`` and ``config.json``, without training.
    ``cfg`` may differ from the stored config only in keys that do not change training
    (``RESUME_IGNORED``). Raises CheckpointError when the weights file is unusable (then
    :func:`train` rewrites it from the last checkpoint)."""
    resolved = as_resolved(cfg)
    cfg = resolved.config
    run_dir = check_run_dir(run_dir)
    task, model = prepare(resolved)
    check_device_available(cfg.train.device, "train.device")
    use_threads(cfg.train.threads, cfg.model.d_model, cfg.train.device)
    with RunDirLock(run_dir, "evaluation"):
        check_same_run(run_dir, cfg.to_dict())
        load_weights(model, os.path.join(run_dir, "model.safetensors"))
        verify_final_weights(run_dir)
        device = torch.device(cfg.train.device)
        model.to(device)
        rows = evaluate(model, task, cfg.eval.splits or task.splits(),
                        n_sequences=cfg.eval.sequences, batch_size=cfg.eval.batch_size,
                        seed=cfg.eval.seed, device=device,
                        meta=dict(run_meta(cfg, run_dir), step=cfg.train.steps),
                        progress=not quiet and cfg.train.progress)
        save_json_atomic(cfg.to_dict(), os.path.join(run_dir, "config.json"), root=run_dir)
        write_rows(rows, run_dir)
    return rows


__all__ = ["evaluate_run", "evaluate_hf", "reevaluate", "build_sampler_checked"]
