"""The training loop: one function, ``train(cfg, run_dir)``.

Separate seeds for model initialisation (``train.seed``) and data order (``train.data_seed``), so
init and data-order variance can be studied apart (Zhou et al. 2024). Every impossible config
(unknown names, a length the positional scheme cannot encode) fails before the first step. Runs
resume exactly from the last checkpoint in ``run_dir`` (weights, optimizer, schedule, torch and
data RNG). A NaN/inf loss stops the run with a clear error and leaves the last good checkpoint.
"""
from __future__ import annotations

import dataclasses
import json
import os
import time

import torch
import torch.nn.functional as F

from lengen.config import ExperimentConfig, save_json_atomic
from lengen.eval.evaluate import evaluate
from lengen.eval.metrics import restrict_to_outputs
from lengen.model import ModelConfig, Transformer
from lengen.tasks import build_task
from lengen.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint, save_weights
from lengen.train.optim import build_optimizer, build_scheduler


class TrainingDiverged(RuntimeError):
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
    """Build task and model (seeded) and validate lengths. Fails fast on impossible configs."""
    task = build_task(cfg.task.name, **cfg.task.kwargs)
    if task.vocab_size > cfg.model.vocab_size:
        cfg.model.vocab_size = task.vocab_size
    if cfg.model.causal != task.causal:
        raise ValueError(f"task {task.name} needs model.causal={task.causal}")
    torch.manual_seed(cfg.train.seed)
    model = Transformer(cfg.model)
    splits = cfg.eval.splits or task.splits()
    for split in splits:
        task.check_split(split)
    model.check_length(task.max_input_length(splits))
    return task, model


class MetricsLog:
    def __init__(self, run_dir, tensorboard: bool):
        self.path = os.path.join(run_dir, "metrics.jsonl")
        self.tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as e:
                raise ImportError("train.tensorboard=true needs: pip install 'lengen[tensorboard]'") from e
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


def train(cfg: ExperimentConfig, run_dir: str, *, resume: bool = True, stop_at: int | None = None,
          quiet: bool = False):
    """Train (or resume) a run in ``run_dir``. ``stop_at`` checkpoints and returns early at that
    step (for time-boxed jobs and resume tests). Returns (model, task, final eval rows or None)."""
    tc = cfg.train
    if tc.threads:
        torch.set_num_threads(tc.threads)
    os.makedirs(run_dir, exist_ok=True)
    task, model = prepare(cfg)
    config_dict = cfg.to_dict()
    cfg_path = os.path.join(run_dir, "config.json")
    ckpt = latest_checkpoint(run_dir) if resume else None
    if ckpt and os.path.exists(cfg_path):
        with open(cfg_path) as f:
            old = json.load(f)
        if old["model"] != json.loads(json.dumps(config_dict["model"], default=str)):
            raise ValueError(f"{run_dir} holds a run with a different model config; "
                             f"use a new run directory or resume=False")
    save_json_atomic(config_dict, cfg_path)

    device = torch.device(tc.device)
    model.to(device)
    opt = build_optimizer(model, tc)
    sched = build_scheduler(opt, tc)
    data_gen = torch.Generator().manual_seed(tc.data_seed)
    step = 0
    if ckpt:
        step = load_checkpoint(ckpt, model, opt, sched, data_gen)
    log = MetricsLog(run_dir, tc.tensorboard)
    meta = run_meta(cfg, run_dir)
    splits = cfg.eval.splits or task.splits()
    end = tc.steps if stop_at is None else min(stop_at, tc.steps)
    out_slice = getattr(task, "output_slice", None)    # loss over the output classes only

    bar = None
    if tc.progress and not quiet:
        from tqdm.auto import tqdm

        bar = tqdm(total=tc.steps, initial=step, desc=cfg.name or os.path.basename(run_dir),
                   dynamic_ncols=True)
    model.train()
    last_saved = step
    try:
        while step < end:
            batch = task.train_batch(tc.batch_size, data_gen).to(device)
            logits, targets = restrict_to_outputs(model(batch.inputs), batch.targets, out_slice,
                                                  batch.loss_mask)
            loss = loss_fn(logits, dataclasses.replace(batch, targets=targets))
            if not torch.isfinite(loss):
                raise TrainingDiverged(
                    f"loss is {loss.item()} at step {step}; stopping. The last good checkpoint "
                    f"(step {last_saved}) is kept in {run_dir}/checkpoints. Try a lower train.lr "
                    f"or a stricter train.grad_clip")
            opt.zero_grad(set_to_none=True)
            loss.backward()
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip or float("inf"))
            opt.step()
            sched.step()
            step += 1
            if bar:
                bar.update(1)
                if step % max(tc.log_every, 1) == 0:
                    bar.set_postfix(loss=f"{loss.item():.4f}")
            if tc.log_every and step % tc.log_every == 0:
                log.write(step, loss=loss.item(), lr=sched.get_last_lr()[0], grad_norm=float(gnorm))
            if tc.eval_every and step % tc.eval_every == 0 and step < tc.steps:
                rows = evaluate(model, task, splits, n_sequences=tc.eval_sequences,
                                batch_size=cfg.eval.batch_size, seed=cfg.eval.seed, device=device)
                log.write(step, **{f"eval/{r['split']}/{r['metric']}": r["value"] for r in rows})
            if tc.ckpt_every and step % tc.ckpt_every == 0 and step < end:
                save_checkpoint(run_dir, step, model, opt, sched, data_gen, config_dict, tc.keep_checkpoints)
                last_saved = step
    except KeyboardInterrupt:
        # between steps the state is consistent: keep it so the run resumes from here
        save_checkpoint(run_dir, step, model, opt, sched, data_gen, config_dict, tc.keep_checkpoints)
        raise
    finally:
        if bar:
            bar.close()
        log.close()
    save_checkpoint(run_dir, step, model, opt, sched, data_gen, config_dict, tc.keep_checkpoints)
    if step < tc.steps:
        return model, task, None
    save_weights(model, os.path.join(run_dir, "model.safetensors"))
    rows = evaluate(model, task, splits, n_sequences=cfg.eval.sequences,
                    batch_size=cfg.eval.batch_size, seed=cfg.eval.seed, device=device,
                    meta=dict(meta, step=step), progress=not quiet and tc.progress)
    write_rows(rows, run_dir)
    return model, task, rows


def run_meta(cfg: ExperimentConfig, run_dir: str) -> dict:
    return {"run": cfg.name or os.path.basename(os.path.normpath(run_dir)), "task": cfg.task.name,
            "pe": cfg.model.posenc, "attention": cfg.model.attention,
            "positions": cfg.model.positions, "seed": cfg.train.seed, "data_seed": cfg.train.data_seed}


def write_rows(rows, run_dir, stem: str = "eval"):
    from lengen.eval.evaluate import rows_to_csv, write_text_atomic

    save_json_atomic(rows, os.path.join(run_dir, f"{stem}.json"))
    write_text_atomic(rows_to_csv(rows), os.path.join(run_dir, f"{stem}.csv"))


def load_run(run_dir: str, device="cpu"):
    """Load a finished (or checkpointed) run -> (cfg, task, model) ready for evaluation."""
    from lengen.config import resolve
    from lengen.train.checkpoint import load_weights

    with open(os.path.join(run_dir, "config.json")) as f:
        cfg = resolve(json.load(f))
    task, model = prepare(cfg)
    weights = os.path.join(run_dir, "model.safetensors")
    if not os.path.exists(weights):
        ck = latest_checkpoint(run_dir)
        if ck is None:
            raise FileNotFoundError(f"{run_dir} has no model.safetensors and no checkpoint")
        weights = os.path.join(ck, "model.safetensors")
    load_weights(model, weights)
    return cfg, task, model.to(device).eval()


__all__ = ["train", "load_run", "build_model", "TrainingDiverged"]
