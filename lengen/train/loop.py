"""The training loop: one function, ``train(cfg, run_dir)``.

Separate seeds for model initialisation (``train.seed``) and data order (``train.data_seed``), so
init and data-order variance can be studied apart (Zhou et al. 2024). Every impossible config
(unknown names or keys, values out of range, a length the positional scheme cannot encode, an
unavailable device, precision or compiler) fails before the run directory is touched.

Random streams, all saved in every checkpoint so a resumed run equals an uninterrupted one bit
for bit: the data generator (``data_seed``), the training-positions generator (derived from
``train.seed``; randomized / label samplers draw from it), torch's global RNG (dropout; seeded by
``train.seed``) and the task's own state (and the fp16 loss scaler's). Evaluation draws from none
of them, so periodic evaluation (``train.eval_every``, on ``train.eval_splits`` or else the
evaluation splits) never changes training.

Run-directory safety (:mod:`lengen.rundir.layout`, :mod:`lengen.rundir.checkpoint`): the directory
is locked for the whole run; resuming with a config that changes what is computed is refused;
``resume=False`` refuses a directory that already holds a run unless ``fresh=True`` moves it
aside; checkpoints are crash-safe and resuming skips unusable ones. Ctrl-C (SIGINT) lets the
current step finish, saves a checkpoint at that step boundary and raises KeyboardInterrupt; a
second Ctrl-C stops at once (the last checkpoint is kept). A NaN/inf loss stops the run with a
clear error naming the last checkpoint, if there is one.

Scaling, applied from outside the single-device model: data-parallel training when launched by
``torchrun`` (:mod:`lengen.train.distributed`: global batch sharded by rank, rank 0 alone touches
the run directory), ``train.precision`` (autocast, loss scaling for fp16) and ``train.compile``
(:mod:`lengen.train.precision`).
"""
from __future__ import annotations

import os
import sys
from dataclasses import replace

import torch
from tqdm.auto import tqdm

from lengen.config import ExperimentConfig, vocab_error
from lengen.fileio import save_json_atomic
from lengen.provenance import RECORD_NAME, start_record
from lengen.errors import (ArgumentError, ConfigError, LengenError, RunDirError,
                           is_out_of_memory)
from lengen.eval.evaluate import check_evaluation_work, evaluate, sequences_evaluated
from lengen.eval.perplexity import eval_logits_at_once
from lengen.model import HFBackbone, ModelConfig, Transformer
from lengen.model import build_model as build
from lengen.model.memory import check_fits
from lengen.threads import use_threads
from lengen.train import distributed
from lengen.rundir.checkpoint import (load_checkpoint, resume_checkpoint,
                                     save_checkpoint, save_final_weights)
from lengen.train.control import MetricsLog, NullLog, StopRequest
from lengen.train.precision import check_runtime, compile_model
from lengen.train.state import TrainingState, positions_generator  # noqa: F401
from lengen.train.step import apply_update, backward_and_clip, forward_loss, loss_fn
# reading a run directory (load_run, prepare) sits below train, eval and analysis, which all use it
from lengen.rundir.checkpoint import checkpoint_step  # noqa: F401
from lengen.rundir.load import (as_experiment_config, as_resolved, load_run,  # noqa: F401
                                load_run_at, prepare)
from lengen.rundir.layout import (PREVIOUS, RunDirLock, check_run_dir, check_same_run, has_run,
                                 move_aside, run_meta, truncate_metrics, write_rows)
from lengen.train.distributed import env_world_size


class TrainingDiverged(LengenError, RuntimeError):
    """The loss became NaN or infinite."""


def build_model(mc: ModelConfig, task=None) -> Transformer | HFBackbone:
    """A model for ``task``: a vocabulary smaller than the task's is an error naming both (as in
    :func:`lengen.config.validate`), never silently raised. ``model.backbone=hf``: a Hugging
    Face model behind lengen's interface (:mod:`lengen.model.hf_backbone`)."""
    if task is not None and mc.vocab_size < task.vocab_size:
        raise vocab_error(mc.vocab_size, task)
    return build(mc)


def check_memory(cfg: ExperimentConfig, task) -> None:
    """Refuse, before any file is written, a run whose training step or final evaluation cannot
    fit in the device's free memory by a lower-bound estimate (:mod:`lengen.model.memory`),
    naming the size behind it (model.d_model, train.batch_size, the task's length)."""
    tc = cfg.train
    act = 4 if tc.precision == "fp32" else 2
    length = task.train_input_length() or task.max_input_length([])
    batch = -(-tc.batch_size // max(env_world_size(), 1))          # rows per process
    on_cpu = torch.device(tc.device).type == "cpu"          # the model was built there
    check_fits(cfg.model, batch=batch, length=length, training=True, device=tc.device,
               act_bytes=act, weights_held=on_cpu,
               sizes=f"train.batch_size={tc.batch_size}, training inputs of {length} tokens "
                     f"(the task's training length)",
               fix="Lower train.batch_size, the task's training length, or the model's size")
    splits = list(cfg.eval.splits or task.splits())
    length = task.max_input_length(splits)
    batch = min(cfg.eval.batch_size, sequences_evaluated(task, cfg.eval.sequences, length))
    check_fits(cfg.model, batch=batch, length=length,
               training=False, weights_held=on_cpu,
               logits_at_once=eval_logits_at_once(task, cfg.model.vocab_size),
               device=tc.device, sizes=f"eval.batch_size={cfg.eval.batch_size}, evaluation inputs "
                                       f"of {length} tokens (the longest of eval.splits)",
               fix="Lower eval.batch_size or drop the longest evaluation splits")
    # the same work bound as lengen eval, for the final and the periodic evaluations: a run must
    # not train for hours and then spin in an evaluation that cannot finish
    check_evaluation_work(cfg.model, task, splits, cfg.eval.sequences, device=tc.device,
                          what=f"the final evaluation ({len(splits)} split(s) x "
                               f"eval.sequences={cfg.eval.sequences})",
                          fix="Lower eval.sequences or drop the longest eval.splits")
    if tc.eval_every:
        periodic = list(tc.eval_splits or splits)
        check_evaluation_work(cfg.model, task, periodic, tc.eval_sequences, device=tc.device,
                              what=f"each periodic evaluation ({len(periodic)} split(s) x "
                                   f"train.eval_sequences={tc.eval_sequences})",
                              fix="Lower train.eval_sequences or drop the longest "
                                  "train.eval_splits")


def train(cfg: ExperimentConfig | dict, run_dir: str, *, resume: bool = True,
          fresh: bool = False, stop_at: int | None = None, quiet: bool = False):
    """Train (or resume) a run in ``run_dir``. ``resume=False`` starts from step 0 and refuses a
    directory that already holds a run; ``fresh=True`` first moves an existing run to
    ``run_dir/previous/<time>/`` (nothing is deleted). ``stop_at`` checkpoints and returns early
    at that step (for time-boxed jobs and resume tests). Returns (model, task, final eval rows or
    None). Under ``torchrun`` (``WORLD_SIZE > 1``) every process calls this; rank 0 gets the rows,
    the other ranks None (see :mod:`lengen.train.distributed`). ``cfg`` may be a plain dict
    (resolved as by :func:`lengen.resolve`)."""
    resolved = as_resolved(cfg)      # validated once: lengen.resolve's, or here
    cfg = resolved.config
    run_dir = check_run_dir(run_dir)
    for name, flag in (("resume", resume), ("fresh", fresh), ("quiet", quiet)):
        if not isinstance(flag, bool):
            raise ArgumentError(f"{name} must be True or False, got {flag!r}")
    tc = cfg.train
    if stop_at is not None and (isinstance(stop_at, bool) or not isinstance(stop_at, int)
                                or stop_at < 0):
        raise ConfigError(f"stop_at must be an integer >= 0, got {stop_at!r}")
    task, model = prepare(resolved)                 # every config error before any file is made
    # again here: resolve(check_device=False) configs (made on another machine) reach train too
    check_runtime(tc)
    check_memory(cfg, task)
    # train.threads, else lengen's choice for this model's size (lengen.threads); the count used
    # is what config.json records, as an explicit train.threads would be
    threads = use_threads(tc.threads, cfg.model.d_model, tc.device)
    if threads != tc.threads:
        cfg = replace(cfg, train=replace(tc, threads=threads))    # the caller's cfg is left as is
        tc = cfg.train
    d = distributed.setup(tc)
    try:
        if d.rank:           # dropout differs per rank; rank 0 keeps the single-process stream
            torch.manual_seed(distributed.rank_seed(tc.seed, d.rank))
        lock = RunDirLock(run_dir, "training")
        distributed.on_main(d, lambda: lock.__enter__() and None)
        try:
            return _train_locked(cfg, run_dir, task, model, d, resume=resume, fresh=fresh,
                                 stop_at=stop_at, quiet=quiet or not d.is_main)
        finally:
            lock.__exit__(None, None, None)
    finally:
        d.close()


def _log(msg: str) -> None:
    print(msg, file=sys.stderr)


def _prepare_dir(run_dir, config_dict, *, resume, fresh) -> None:
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


def _resume(st: TrainingState, model, run_dir: str, d, *, resume, fresh) -> int | None:
    """Rank 0 reads the newest usable checkpoint into the model and ``st`` (the other ranks get
    its training state); the step it resumes at, or None for a fresh start."""
    def read():
        if not (resume and not fresh):
            return None, None
        found = {}

        def apply(path):
            found["state"] = load_checkpoint(path, model)
            return st.load(found["state"], log=_log)

        return resume_checkpoint(run_dir, apply, log=_log), found.get("state")

    step, state = distributed.on_main(d, read)
    if state is not None and not d.is_main:
        st.load(state, log=_log)
    return step


def _open_log(cfg, run_dir: str, config_dict: dict, step: int):
    """The metrics log of the run (metrics.jsonl past ``step`` cut, config.json written,
    TensorBoard / W&B as configured); main rank only."""
    tc = cfg.train
    truncate_metrics(run_dir, step, log=_log)
    save_json_atomic(config_dict, os.path.join(run_dir, "config.json"), root=run_dir)
    # the lengen commit, dirty state and start time (first start kept on resume): issue 54
    save_json_atomic(start_record(run_dir, step), os.path.join(run_dir, RECORD_NAME),
                     root=run_dir)
    wandb = None
    if tc.wandb:
        wandb = dict(project=tc.wandb_project,
                     name=tc.wandb_name or cfg.name or os.path.basename(os.path.abspath(run_dir)),
                     tags=tc.wandb_tags, config=config_dict)
    return MetricsLog(run_dir, tc.tensorboard, wandb=wandb)


class _Checkpoints:
    """Saving the run at a step boundary (rank 0 writes; every rank contributes its RNG streams)
    and the step of the last checkpoint written, which errors and interrupts name."""

    def __init__(self, run_dir: str, model, st: TrainingState, d, config_dict: dict, keep: int):
        self.run_dir, self.model, self.st, self.d = run_dir, model, st, d
        self.config_dict, self.keep = config_dict, keep
        self.last: int | None = None

    def save(self, step: int) -> None:
        ranks = distributed.gather(self.d, self.st.rank_rng()) if self.d.active else None
        distributed.on_main(self.d, lambda: save_checkpoint(
            self.run_dir, step, self.model, self.st.to_dict(ranks), self.config_dict,
            self.keep) and None)
        self.last = step


def _main_log(cfg, run_dir: str, config_dict: dict, step: int, d):
    """The main rank's metrics log; a NullLog on the other ranks (on_main would send the log
    object to every rank)."""
    opened = {}
    distributed.on_main(d, lambda: opened.update(log=_open_log(cfg, run_dir, config_dict, step)))
    return opened.get("log") or NullLog()


def _progress_bar(cfg, run_dir: str, step: int, quiet: bool):
    if not cfg.train.progress or quiet:
        return None
    return tqdm(total=cfg.train.steps, initial=step, dynamic_ncols=True,
                desc=cfg.name or os.path.basename(run_dir))


def _global_batch(task, model, st: TrainingState, batch_size: int, d, device):
    """The step's batch and its positions: every rank draws the *global* batch (one data stream,
    so a run is the same at every world size) and keeps its own rows. -> (batch, positions [T] or
    [B, T], denom: the global batch's scored-token count when data-parallel, else None)."""
    batch = task.train_batch(batch_size, st.data_gen).to(device)
    B, T = batch.inputs.shape
    positions = model.sample_positions(T, batch_size=B, device=device, generator=st.pos_gen,
                                       batch=batch)
    if not d.active:
        return batch, positions, None
    denom = batch.loss_mask.sum().clamp_min(1)                  # scored tokens, global batch
    lo, hi = d.rows(B)
    positions = positions[lo:hi] if positions.dim() == 2 else positions
    return batch.rows(lo, hi), positions, denom


def _check_finite(loss: torch.Tensor, step: int, last_saved: int | None, run_dir: str) -> None:
    if torch.isfinite(loss):
        return
    kept = (f"The last good checkpoint (step {last_saved}) is kept in "
            f"{os.path.join(run_dir, 'checkpoints')}" if last_saved is not None else
            "No checkpoint was written yet (train.ckpt_every sets how often)")
    raise TrainingDiverged(f"loss is {loss.item()} at step {step}; stopping. {kept}. Try a lower "
                           f"train.lr or a stricter train.grad_clip, in a new --run-dir or with "
                           f"--fresh")


def _report(step: int, loss: torch.Tensor, gnorm, lr: float, tc, log, bar) -> None:
    """The progress bar and the metrics log after a step."""
    if bar:
        bar.update(1)
        if step % max(tc.log_every, 1) == 0:
            bar.set_postfix(loss=f"{loss.item():.4f}")
    if tc.log_every and step % tc.log_every == 0:
        log.write(step, loss=loss.item(), lr=lr, grad_norm=float(gnorm))


def _save_interrupted(ck: _Checkpoints, st: TrainingState, d, phase: str, snapshot, step: int,
                      quiet: bool) -> None:
    """A KeyboardInterrupt that bypassed the Ctrl-C handler (raised by code, or outside the main
    thread): keep a checkpoint only if the state is a step boundary (or can be rolled back to
    one); a half-applied update is never saved. Data-parallel ranks cannot agree on a checkpoint
    from here (they may be in different collectives): nothing is saved."""
    if d.active:
        if not quiet:                      # quiet on every rank but 0
            _log(f"lengen: interrupted in the middle of a data-parallel step; not saving (the "
                 f"last checkpoint, step {ck.last}, is kept)")
    elif phase == "compute":
        st.rollback(snapshot)
        ck.save(step)
    elif phase == "boundary":
        ck.save(step)
    elif not quiet:
        _log(f"lengen: interrupted during an optimizer update; not saving that state (the last "
             f"checkpoint, step {ck.last}, is kept)")


def _train_locked(cfg, run_dir, task, model, d, *, resume, fresh, stop_at, quiet):
    tc = cfg.train
    config_dict = cfg.to_dict()
    distributed.on_main(d, lambda: _prepare_dir(run_dir, config_dict, resume=resume, fresh=fresh))

    device = distributed.training_device(tc.device, d.world_size, d.local_rank)
    model.to(device)
    st = TrainingState(model, task, tc, d, device)      # optimizer, schedule, RNG streams
    ck = _Checkpoints(run_dir, model, st, d, config_dict, tc.keep_checkpoints)
    ck.last = _resume(st, model, run_dir, d, resume=resume, fresh=fresh)
    step = ck.last or 0

    log = _main_log(cfg, run_dir, config_dict, step, d)
    splits = cfg.eval.splits or task.splits()
    periodic = tc.eval_splits or splits          # periodic evaluation: chosen lengths, if given
    end = tc.steps if stop_at is None else min(stop_at, tc.steps)
    out_slice = getattr(task, "output_slice", None)    # loss over the output classes only
    fwd = distributed.wrap(model, d, device)           # DDP broadcasts rank 0's weights
    if tc.compile:
        fwd = compile_model(fwd)
    bar = _progress_bar(cfg, run_dir, step, quiet)

    model.train()
    # the batches are the task's and the positions the sampler's, both checked when the config
    # was validated: skip forward's per-call check of ids and positions (one device sync, about
    # 0.1 ms on CPU, 10% of a tiny model's step)
    model.check_inputs = False
    stop = StopRequest(announce=d.is_main).install()
    phase, snapshot, stopping, looped = "boundary", None, False, False
    try:
        while step < end and not (stopping if d.active else stop.requested):
            # RNG states at the step boundary: an exception raised while drawing or computing
            # (before the update) rolls back to them, so the saved state is exactly this boundary
            # (one process only: a data-parallel interrupt saves nothing, see _save_interrupted)
            if not d.active:
                snapshot = st.boundary()
            phase = "compute"
            batch, positions, denom = _global_batch(task, model, st, tc.batch_size, d, device)
            loss = forward_loss(fwd, batch, positions, tc, device, out_slice, denom, loss=loss_fn)
            if denom is not None:
                loss = loss * d.world_size       # DDP averages gradients over the ranks
            shown, stopping = distributed.agree(d, loss, stop.requested)   # global loss
            _check_finite(shown, step, ck.last, run_dir)
            gnorm = backward_and_clip(loss, model, st.opt, st.scaler, tc)
            phase = "update"
            apply_update(st.opt, st.scaler, st.sched)
            step += 1
            phase = "boundary"
            _report(step, shown, gnorm, st.sched.get_last_lr()[0], tc, log, bar)
            if tc.eval_every and step % tc.eval_every == 0 and step < tc.steps and d.is_main:
                rows = evaluate(model, task, periodic, n_sequences=tc.eval_sequences,
                                batch_size=cfg.eval.batch_size, seed=cfg.eval.seed, device=device)
                log.write(step, **{f"eval/{r['split']}/{r['metric']}": r["value"] for r in rows})
            if tc.ckpt_every and step % tc.ckpt_every == 0 and step < end:
                ck.save(step)
        looped = True
    except KeyboardInterrupt:
        _save_interrupted(ck, st, d, phase, snapshot, step, quiet)
        raise
    except PLUGIN_FAILURES as e:
        failure = plugin_failure(cfg, e, f"training step {step + 1}")
        if failure is e:
            raise
        raise failure from e
    finally:
        model.check_inputs = True
        stop.restore()
        if bar:
            bar.close()
        if not looped:
            log.close(failed=True)
    # the log stays open for the final evaluation's rows (a W&B table)
    failed = True
    try:
        ck.save(step)
        if stopping or (not d.active and stop.requested):
            raise KeyboardInterrupt
        if step < tc.steps or not d.is_main:
            failed = False
            return model, task, None
        try:
            rows = _final_eval(cfg, run_dir, model, task, splits, step, device, quiet)
        except PLUGIN_FAILURES as e:
            failure = plugin_failure(cfg, e, "the final evaluation")
            if failure is e:
                raise
            raise failure from e
        log.rows(step, rows)
        failed = False
    finally:
        log.close(failed=failed)
    return model, task, rows


#: what a broken plugin raises from inside the model or the task (a wrong-shape bias, an id out of
#: range, a missing key): reported by plugin_failure when the run uses a plugin
PLUGIN_FAILURES = (KeyError, IndexError, RuntimeError, TypeError, ValueError, AttributeError,
                   AssertionError, ArithmeticError)


def plugin_failure(cfg, e: BaseException, where: str) -> BaseException:
    """``e`` as a :class:`PluginFailed` naming the plugin(s) the run uses (import paths among
    model.posenc / attention / positions / task.name) and ``lengen check``, as ``lengen check``
    reports a contract its entry breaks; ``e`` itself when the run uses no plugin, or when it is
    already one of lengen's own errors or an out-of-memory error (a bug in lengen is reported as
    unexpected, with --debug for the traceback)."""
    plugins = [(key, name) for key, name in (
        ("model.posenc", cfg.model.posenc), ("model.attention", cfg.model.attention),
        ("model.positions", cfg.model.positions), ("task.name", cfg.task.name))
        if isinstance(name, str) and ":" in name]
    if not plugins or isinstance(e, LengenError) or is_out_of_memory(e):
        return e
    text = (str(e).splitlines() or [""])[0] or type(e).__name__
    named = ", ".join(f"{name} ({key})" for key, name in plugins)
    checks = " and ".join(f"lengen check {name}" for _, name in plugins)
    return PluginFailed(f"{where} failed inside the run's plugin code ({named}): "
                        f"{type(e).__name__}: {text}. Run `{checks}` to see which of lengen's "
                        f"contracts it breaks (rerun with --debug for the traceback)")


class PluginFailed(LengenError, RuntimeError):
    """A plugin (scheme, attention kind, sampler, task) raised while training or evaluating."""


def _final_eval(cfg, run_dir: str, model, task, splits, step: int, device, quiet: bool) -> list:
    """The finished run's weights (model.safetensors) and evaluation rows (eval.json / .csv)."""
    save_final_weights(model, run_dir, step)
    rows = evaluate(model, task, splits, n_sequences=cfg.eval.sequences,
                    batch_size=cfg.eval.batch_size, seed=cfg.eval.seed, device=device,
                    meta=dict(run_meta(cfg, run_dir), step=step),
                    progress=not quiet and cfg.train.progress)
    write_rows(rows, run_dir)
    return rows


__all__ = ["PluginFailed", "plugin_failure", "train", "load_run", "load_run_at", "build_model", "prepare", "as_experiment_config",
           "checkpoint_step", "TrainingDiverged"]
