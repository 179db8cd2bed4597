"""The training loop: one function, ``train(cfg, run_dir)``.

Separate seeds for model initialisation (``train.seed``) and data order (``train.data_seed``), so
init and data-order variance can be studied apart (Zhou et al. 2024). Every impossible config
(unknown names or keys, values out of range, a length the positional scheme cannot encode, an
unavailable device) fails before the run directory is touched.

Random streams, all saved in every checkpoint so a resumed run equals an uninterrupted one bit
for bit: the data generator (``data_seed``), the training-positions generator (derived from
``train.seed``; randomized / label samplers draw from it), torch's global RNG (dropout; seeded by
``train.seed``) and the task's own state. Evaluation draws from none of them, so periodic
evaluation (``train.eval_every``, on ``train.eval_splits`` or else the evaluation splits) never
changes training.

Run-directory safety (:mod:`lengen.train.rundir`, :mod:`lengen.train.checkpoint`): the directory
is locked for the whole run; resuming with a config that changes what is computed is refused;
``resume=False`` refuses a directory that already holds a run unless ``fresh=True`` moves it
aside; checkpoints are crash-safe and resuming skips unusable ones. Ctrl-C (SIGINT) lets the
current step finish, saves a checkpoint at that step boundary and raises KeyboardInterrupt; a
second Ctrl-C stops at once (the last checkpoint is kept). A NaN/inf loss stops the run with a
clear error naming the last checkpoint, if there is one.
"""
from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import threading
import time

import torch
import torch.nn.functional as F

from lengen.checks import check_device_available
from lengen.config import ExperimentConfig, save_json_atomic, validate
from lengen.errors import ConfigError, LengenError, RunDirError
from lengen.eval.evaluate import evaluate
from lengen.eval.metrics import restrict_to_outputs
from lengen.model import ModelConfig, Transformer
from lengen.tasks.base import block_seed
from lengen.train.checkpoint import (latest_checkpoint, load_checkpoint, resume_checkpoint,
                                     save_checkpoint, save_weights)
from lengen.train.optim import build_optimizer, build_scheduler
from lengen.train.rundir import (PREVIOUS, RunDirLock, check_same_run, has_run, move_aside,
                                 run_meta, truncate_metrics, write_rows)


class TrainingDiverged(LengenError, RuntimeError):
    """The loss became NaN or infinite."""


def build_model(mc: ModelConfig, task=None) -> Transformer:
    if task is not None and mc.vocab_size < task.vocab_size:
        mc.vocab_size = task.vocab_size
    return Transformer(mc)


def loss_fn(logits, batch):
    """Mean cross-entropy over ``batch.loss_mask``; ``train`` hands it logits and targets already
    restricted to the task's output classes when the task has an ``output_slice``."""
    mask = batch.loss_mask
    nll = F.cross_entropy(logits.float().flatten(0, 1), batch.targets.flatten(), reduction="none")
    return (nll * mask.flatten().float()).sum() / mask.sum().clamp_min(1)


def prepare(cfg: ExperimentConfig):
    """Validate ``cfg`` (everything but the device) and build task and model (seeded)."""
    task = validate(cfg, check_device=False)
    torch.manual_seed(cfg.train.seed)
    model = Transformer(cfg.model)
    return task, model


def positions_generator(seed: int) -> torch.Generator:
    """The training-positions stream: its own generator, derived from ``train.seed``."""
    return torch.Generator().manual_seed(block_seed(seed, "train", 0, "positions"))


class MetricsLog:
    def __init__(self, run_dir, tensorboard: bool):
        self.path = os.path.join(run_dir, "metrics.jsonl")
        self.tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as e:
                raise ConfigError("train.tensorboard=true needs TensorBoard: pip install "
                                  "'lengen[tensorboard]' (or set train.tensorboard=false)") from e
            self.tb = SummaryWriter(os.path.join(run_dir, "tb"))

    def write(self, step: int, **values):
        with open(self.path, "a") as f:
            f.write(json.dumps(dict(step=step, time=time.time(), **values)) + "\n")
        if self.tb:
            for k, v in values.items():
                if isinstance(v, (int, float)):
                    self.tb.add_scalar(k, v, step)

    def close(self):
        if self.tb:
            self.tb.close()


class StopRequest:
    """SIGINT handler for the duration of training: the first Ctrl-C asks the loop to stop at the
    next step boundary, a second one raises KeyboardInterrupt at once. Installed only from the
    main thread (signals cannot be handled elsewhere); the previous handler is restored."""

    def __init__(self):
        self.requested, self._prev, self._installed = False, None, False

    def install(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():
            try:
                self._prev = signal.signal(signal.SIGINT, self._handle)
                self._installed = True
            except ValueError:
                pass
        return self

    def _handle(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True       # told even in quiet runs: the Ctrl-C was heard
        print("\nlengen: interrupt received; finishing this step and saving a checkpoint "
              "(Ctrl-C again to stop at once)", file=sys.stderr)

    def restore(self) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._prev if self._prev is not None else signal.SIG_DFL)
            self._installed = False


def train(cfg: ExperimentConfig, run_dir: str, *, resume: bool = True, fresh: bool = False,
          stop_at: int | None = None, quiet: bool = False):
    """Train (or resume) a run in ``run_dir``. ``resume=False`` starts from step 0 and refuses a
    directory that already holds a run; ``fresh=True`` first moves an existing run to
    ``run_dir/previous/<time>/`` (nothing is deleted). ``stop_at`` checkpoints and returns early
    at that step (for time-boxed jobs and resume tests). Returns (model, task, final eval rows or
    None)."""
    tc = cfg.train
    if stop_at is not None and (isinstance(stop_at, bool) or not isinstance(stop_at, int)
                                or stop_at < 0):
        raise ConfigError(f"stop_at must be an integer >= 0, got {stop_at!r}")
    task, model = prepare(cfg)                      # every config error before any file is made
    check_device_available(tc.device, "train.device")
    if tc.threads:
        torch.set_num_threads(tc.threads)
    with RunDirLock(run_dir, "training"):
        return _train_locked(cfg, run_dir, task, model, resume=resume, fresh=fresh,
                             stop_at=stop_at, quiet=quiet)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr)


def _train_locked(cfg, run_dir, task, model, *, resume, fresh, stop_at, quiet):
    tc = cfg.train
    config_dict = cfg.to_dict()
    if fresh:
        moved = move_aside(run_dir)
        if moved:
            _log(f"lengen: moved the previous run in {run_dir} to {moved}")
    elif not resume and has_run(run_dir):
        raise RunDirError(f"{run_dir} already holds a run; starting over in it would mix two runs "
                          f"(metrics.jsonl, checkpoints). Pass --fresh (fresh=True) to move it to "
                          f"{os.path.join(run_dir, PREVIOUS)}/ first, leave out --no-resume "
                          f"(resume=True) to continue it, or use another --run-dir")
    else:
        check_same_run(run_dir, config_dict)

    device = torch.device(tc.device)
    model.to(device)
    opt = build_optimizer(model, tc)
    sched = build_scheduler(opt, tc)
    data_gen = torch.Generator().manual_seed(tc.data_seed)
    pos_gen = positions_generator(tc.seed)

    def training_state() -> dict:
        state = {"optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                 "torch_rng": torch.get_rng_state(), "data_rng": data_gen.get_state(),
                 "positions_rng": pos_gen.get_state(), "task": task.state_dict()}
        if device.type == "cuda":
            state["cuda_rng"] = torch.cuda.get_rng_state_all()
        return state

    def restore(path: str) -> int:
        state = load_checkpoint(path, model)
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        torch.set_rng_state(state["torch_rng"])
        data_gen.set_state(state["data_rng"])
        if "positions_rng" in state:      # checkpoints before the positions stream had none
            pos_gen.set_state(state["positions_rng"])
        cuda_rng = state.get("cuda_rng")
        if cuda_rng is not None and device.type == "cuda" and \
                len(cuda_rng) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda_rng)
        task.load_state_dict(state.get("task") or {})
        return int(state["step"])

    step = 0
    if resume and not fresh:
        resumed = resume_checkpoint(run_dir, restore, log=_log)
        step = resumed or 0
        last_saved = resumed
    else:
        last_saved = None
    truncate_metrics(run_dir, step, log=_log)
    save_json_atomic(config_dict, os.path.join(run_dir, "config.json"))

    log = MetricsLog(run_dir, tc.tensorboard)
    meta = run_meta(cfg, run_dir)
    splits = cfg.eval.splits or task.splits()
    periodic = tc.eval_splits or splits          # periodic evaluation: chosen lengths, if given
    end = tc.steps if stop_at is None else min(stop_at, tc.steps)
    out_slice = getattr(task, "output_slice", None)    # loss over the output classes only

    def save(at: int) -> None:
        nonlocal last_saved
        save_checkpoint(run_dir, at, model, training_state(), config_dict, tc.keep_checkpoints)
        last_saved = at

    bar = None
    if tc.progress and not quiet:
        from tqdm.auto import tqdm

        bar = tqdm(total=tc.steps, initial=step, desc=cfg.name or os.path.basename(run_dir),
                   dynamic_ncols=True)
    model.train()
    stop = StopRequest().install()
    phase, snapshot = "boundary", None
    try:
        while step < end and not stop.requested:
            # RNG states at the step boundary: an exception raised while drawing or computing
            # (before the update) rolls back to them, so the saved state is exactly this boundary
            snapshot = (torch.get_rng_state(), data_gen.get_state(), pos_gen.get_state(),
                        task.state_dict(),
                        torch.cuda.get_rng_state(device) if device.type == "cuda" else None)
            phase = "compute"
            batch = task.train_batch(tc.batch_size, data_gen).to(device)
            B, T = batch.inputs.shape
            positions = model.sample_positions(T, batch_size=B, device=device, generator=pos_gen,
                                               lengths=batch.lengths(), tokens=batch.inputs)
            logits, targets = restrict_to_outputs(model(batch.inputs, positions=positions),
                                                  batch.targets, out_slice, batch.loss_mask)
            loss = loss_fn(logits, dataclasses.replace(batch, targets=targets))
            if not torch.isfinite(loss):
                kept = (f"The last good checkpoint (step {last_saved}) is kept in "
                        f"{os.path.join(run_dir, 'checkpoints')}" if last_saved is not None else
                        "No checkpoint was written yet (train.ckpt_every sets how often)")
                raise TrainingDiverged(
                    f"loss is {loss.item()} at step {step}; stopping. {kept}. Try a lower "
                    f"train.lr or a stricter train.grad_clip, in a new --run-dir or with --fresh")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip or float("inf"))
            phase = "update"
            opt.step()
            sched.step()
            step += 1
            phase = "boundary"
            if bar:
                bar.update(1)
                if step % max(tc.log_every, 1) == 0:
                    bar.set_postfix(loss=f"{loss.item():.4f}")
            if tc.log_every and step % tc.log_every == 0:
                log.write(step, loss=loss.item(), lr=sched.get_last_lr()[0], grad_norm=float(gnorm))
            if tc.eval_every and step % tc.eval_every == 0 and step < tc.steps:
                rows = evaluate(model, task, periodic, n_sequences=tc.eval_sequences,
                                batch_size=cfg.eval.batch_size, seed=cfg.eval.seed, device=device)
                log.write(step, **{f"eval/{r['split']}/{r['metric']}": r["value"] for r in rows})
            if tc.ckpt_every and step % tc.ckpt_every == 0 and step < end:
                save(step)
    except KeyboardInterrupt:
        # a KeyboardInterrupt that bypassed the handler (raised by code, or outside the main
        # thread): keep a checkpoint only if the state is a step boundary (or can be rolled
        # back to one); a half-applied update is never saved
        if phase == "compute":
            torch.set_rng_state(snapshot[0])
            data_gen.set_state(snapshot[1])
            pos_gen.set_state(snapshot[2])
            task.load_state_dict(snapshot[3])
            if snapshot[4] is not None:
                torch.cuda.set_rng_state(snapshot[4], device)
            save(step)
        elif phase == "boundary":
            save(step)
        elif not quiet:
            _log(f"lengen: interrupted during an optimizer update; not saving that state (the "
                 f"last checkpoint, step {last_saved}, is kept)")
        raise
    finally:
        stop.restore()
        if bar:
            bar.close()
        log.close()
    save(step)
    if stop.requested:
        raise KeyboardInterrupt
    if step < tc.steps:
        return model, task, None
    save_weights(model, os.path.join(run_dir, "model.safetensors"))
    rows = evaluate(model, task, splits, n_sequences=cfg.eval.sequences,
                    batch_size=cfg.eval.batch_size, seed=cfg.eval.seed, device=device,
                    meta=dict(meta, step=step), progress=not quiet and tc.progress)
    write_rows(rows, run_dir)
    return model, task, rows


def load_run(run_dir: str, device="cpu"):
    """Load a finished (or checkpointed) run -> (cfg, task, model) ready for evaluation."""
    from lengen.config import resolve
    from lengen.train.checkpoint import load_weights

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
    try:
        cfg = resolve(stored, check_device=False)
    except ConfigError as e:
        raise ConfigError(f"{cfg_path}: {e}") from None
    task, model = prepare(cfg)
    weights = os.path.join(run_dir, "model.safetensors")
    if not os.path.exists(weights):
        ck = latest_checkpoint(run_dir)
        if ck is None:
            raise RunDirError(f"{run_dir} has no model.safetensors and no usable checkpoint; "
                              f"train it first (lengen train --run-dir {run_dir} ...)")
        weights = os.path.join(ck, "model.safetensors")
    try:
        load_weights(model, weights)
    except RunDirError as e:
        raise RunDirError(f"{e}; {fix}") from None
    return cfg, task, model.to(device).eval()


__all__ = ["train", "load_run", "build_model", "prepare", "TrainingDiverged"]
