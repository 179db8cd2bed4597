"""Shared parts of the language-modelling recipes (``lengen reproduce tra-wikitext``,
``lengen reproduce index-warping-lm``): the text-task section of a scale, the time estimate, and
perplexity-vs-length summaries for the reports.

A scale of an LM recipe is a dict with the text-task keys ``corpus``, ``tokenizer``,
``tokenizer_kwargs``, ``seq_len`` (training window T), ``eval_multiples`` (evaluation lengths as
multiples of T), ``eval_split``, ``max_eval_tokens`` (``EVAL_ALL``: the whole split) and
optionally ``max_chars`` (smoke tests), beside the recipe's own model and training keys.

The estimate (:func:`estimate_runs`) times, per distinct run configuration (seeds share one
timing), ``steps`` training steps (positions drawn as in training) and one evaluation batch at
every evaluation length on the perplexity path the run will take, with the torch threads each
sweep worker gets; a run costs ``steps x step time + sum over lengths of batches x batch time``.
The sweep hands runs to the first free worker in order, and the estimate schedules the runs the
same way (:mod:`lengen.recipes.estimate`, shared by every recipe), so its total is the wall time
of the slowest worker, not the sum divided by workers.
Concurrent workers share memory bandwidth, and other load slows everything: measure on an
otherwise idle machine.
"""
from __future__ import annotations

import math
import time

import torch

from lengen.analysis.tables import summarize
from lengen.config import resolve
from lengen.eval.evaluate import eval_stream
from lengen.eval.perplexity import score_batch
from lengen.recipes.common import default_device
from lengen.recipes.estimate import (makespan, report_total, time_training_steps, timed,
                                     timing_key, use_worker_threads)
from lengen.rundir.load import as_resolved, prepare
from lengen.tasks import build_task

#: ``max_eval_tokens`` that scores the whole evaluation split at every length (paper scales)
EVAL_ALL = 10 ** 9

#: ratio of the perplexity at the longest evaluated length to the one at the training length, at
#: or below which a model "keeps or improves" its perplexity, and above which it "blows up"
KEEP_RATIO = 1.05
BLOW_UP_RATIO = 2.0


def eval_lengths(s: dict) -> list[int]:
    """Evaluation lengths of a scale: ``seq_len`` x ``eval_multiples``."""
    return [int(round(s["seq_len"] * m)) for m in s["eval_multiples"]]


def text_task_kwargs(s: dict, *, corpus: str | None = None, data_dir: str | None = None,
                     eval_lengths_: list[int] | None = None) -> dict:
    """``task.kwargs`` of the ``text`` task for scale ``s`` (``corpus`` / ``data_dir`` override
    the scale's corpus, e.g. WikiText-103 files for the paper scale)."""
    kw = {"corpus": corpus or s["corpus"], "tokenizer": s["tokenizer"],
          "seq_len": s["seq_len"],
          "eval_lengths": list(eval_lengths_ if eval_lengths_ is not None else eval_lengths(s)),
          "eval_split": s["eval_split"], "max_eval_tokens": s["max_eval_tokens"]}
    if s.get("tokenizer_kwargs"):
        kw["tokenizer_kwargs"] = dict(s["tokenizer_kwargs"])
    if s.get("max_chars"):
        kw["max_chars"] = s["max_chars"]
    if data_dir:
        kw["data_dir"] = data_dir
    return kw


def task_caption(task_kwargs: dict) -> str:
    """``Text.caption()`` of these task kwargs (corpus, saying when it is the KJV stand-in,
    tokenizer, split, protocol). Builds the task: the token cache makes that cheap after a run."""
    return build_task("text", **task_kwargs).caption()


# ---------------------------------------------------------------------------- the estimate

def time_config(cfg, *, steps: int = 10, device: str = "cpu", eval_extra=None) -> dict:
    """Seconds per training step and per length of evaluation for one resolved config.

    Training steps: :func:`lengen.recipes.estimate.time_training_steps` (the loop's own
    pieces, two untimed steps first). Evaluation: one batch per length from the evaluation
    stream (the run's windows, batching and positions), scored with the blocked perplexity
    scorer after an untimed warm-up, times the number of batches at that length. ``eval_extra``:
    ``(label, sampler)`` pairs whose evaluation of the same weights is timed too (e.g. the RoPE
    model evaluated with position interpolation).
    Returns ``{"step", "setup", "train", "eval": {K: s}, "extra": {label: {K: s}}}``
    (``setup``: building the task and model, which every run does once)."""
    t0 = time.perf_counter()
    resolved = as_resolved(cfg)
    cfg = resolved.config
    task, model = prepare(resolved)     # a run builds its task (token cache) and model too
    t_setup = time.perf_counter() - t0
    t_step = time_training_steps(cfg, task, model, steps=steps, device=device)

    def eval_seconds() -> dict:
        out = {}
        for split in cfg.eval.splits or task.splits():
            K = task.length_of(split)
            starts, _ = task.eval_plan(split, None)
            rows = max(1, min(int(cfg.eval.batch_size), task.eval_batch_tokens // K))
            n_batches = -(-len(starts) // rows)
            stream = eval_stream(model, task, split, None, cfg.eval.batch_size, cfg.eval.seed,
                                 device)
            _, batch, pos = next(stream)
            stream.close()
            first = pos if pos is None or pos.dim() == 1 else pos[:1]
            score_batch(model, batch.rows(0, 1), positions=first)               # warm-up
            t = timed(lambda: score_batch(model, batch, positions=pos), device)
            # a batch cut short by an evaluation block boundary is scaled to a full one
            out[K] = t * rows / batch.inputs.shape[0] * n_batches
        return out

    with torch.inference_mode():
        evals = eval_seconds()
        extra = {}
        for label, sampler in (eval_extra or []):
            kept, model.sampler = model.sampler, sampler
            try:
                extra[label] = eval_seconds()
            finally:
                model.sampler = kept
    return {"step": t_step, "setup": t_setup, "train": t_step * cfg.train.steps, "eval": evals,
            "extra": extra}


def estimate_runs(specs, *, steps: int = 10, workers: int = 1, threads: int | None = None,
                  device: str = "cpu", label=lambda spec: spec.name, eval_extra=None,
                  after: float = 0.0, log=print) -> dict:
    """Time every distinct config of ``specs`` (RunSpecs) and schedule the runs over
    ``workers`` (see the module docstring). ``eval_extra(spec) -> [(label, sampler)]`` adds
    evaluations of a run's weights with other samplers, run after the sweep in the main process
    (added to the total serially). Returns ``{"per_run", "total_seconds", "workers"}``."""
    use_worker_threads(workers, threads)
    timings, per_run, serial = {}, {}, after
    for spec in specs:
        key = timing_key(spec.config)
        extra = list(eval_extra(spec)) if eval_extra else []
        if key not in timings:
            resolved = resolve(spec.config, check_device=False)
            cfg = resolved.config
            timings[key] = time_config(resolved, steps=steps, device=device, eval_extra=extra)
            t = timings[key]
            lens = ", ".join(f"{k}: {v:.0f}" for k, v in t["eval"].items())
            log(f"{label(spec):>22}: {1000 * t['step']:7.1f} ms/step x {cfg.train.steps} = "
                f"{t['train'] / 60:6.1f} min; evaluation s per length {{{lens}}}")
        t = timings[key]
        per_run[spec.name] = t["setup"] + t["train"] + sum(t["eval"].values())
        for lab, ev in t["extra"].items():
            serial += sum(ev.values())
            log(f"{'':>22}  + {lab}: {sum(ev.values()) / 60:.1f} min after the sweep")
    total = report_total(list(per_run.values()), workers, f"{len(specs)} run(s)",
                         serial=serial, log=log)
    return {"per_run": per_run, "total_seconds": total,
            "workers": makespan(list(per_run.values()), workers)[1]}


# ---------------------------------------------------------------------------- summaries

def perplexity_table(rows, by: str = "model") -> dict:
    """``{group: {length: {"mean", "std", "n", "values"}}}`` of the ``ppl`` rows (over seeds)."""
    summ = summarize(rows, by=(by, "length"), metric="ppl")
    out: dict = {}
    for r in summ.to_dict("records"):
        out.setdefault(r[by], {})[int(r["length"])] = {
            "mean": r["mean"], "std": r["std"], "n": int(r["n"])}
    return out


def trend(curve: dict, train_length: int) -> tuple[float, str]:
    """``(ratio, label)``: perplexity at the longest evaluated length over the one at the
    training length, and in words (``improves`` <= 0.98 < ``keeps`` <= KEEP_RATIO <
    ``degrades`` <= BLOW_UP_RATIO < ``blows up``)."""
    if train_length not in curve or not curve:
        return math.nan, "-"
    last = curve[max(curve)]
    base = curve[train_length]
    if not (math.isfinite(base) and base > 0):
        return math.nan, "-"
    ratio = last / base if math.isfinite(last) else math.inf
    if ratio <= 0.98:
        return ratio, "improves"
    if ratio <= KEEP_RATIO:
        return ratio, "keeps"
    if ratio <= BLOW_UP_RATIO:
        return ratio, "degrades"
    return ratio, "blows up"


def holds_to(curve: dict, train_length: int) -> float:
    """How far a model keeps its perplexity: the largest evaluation length (as a multiple of
    the training length) up to which every length's perplexity is <= KEEP_RATIO x the one at the
    training length; nan without a finite value there. The TRA paper's reading of CoPE, "holds
    to ~10x, then deteriorates", is this number."""
    base = curve.get(train_length, math.nan)
    if not (math.isfinite(base) and base > 0):
        return math.nan
    reach = train_length
    for k in sorted(k for k in curve if k > train_length):
        if not (curve[k] <= KEEP_RATIO * base):          # nan / inf count as not kept
            break
        reach = k
    return reach / train_length


def fmt_ppl(mean, std=None) -> str:
    """``31.74``, ``31.74 ± 0.11``, ``1.2e+04`` past 10^4, ``-`` when missing, ``inf``."""
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "-"
    if math.isinf(mean):
        return "inf"
    f = (lambda v: f"{v:.3g}") if mean >= 1e4 else (lambda v: f"{v:.2f}")
    if std is None or (isinstance(std, float) and math.isnan(std)):
        return f(mean)
    return f"{f(mean)} ± {f(std)}"


__all__ = ["EVAL_ALL", "KEEP_RATIO", "BLOW_UP_RATIO", "eval_lengths", "text_task_kwargs",
           "task_caption", "default_device", "time_config", "estimate_runs",
           "perplexity_table", "trend", "holds_to", "fmt_ppl"]
