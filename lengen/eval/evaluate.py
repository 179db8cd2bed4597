"""Evaluation on named splits -> pandas-friendly rows.

Each row: ``{run, task, split, length, metric, value, pe, attention, positions, seed, data_seed,
step}`` for metrics ``seq_acc`` (whole-sequence accuracy), ``token_acc`` (per-read accuracy for
flip-flop), ``glitch_rate`` (1 - token_acc) and ``nll``; language-modelling tasks get ``ppl``
and ``nll`` per evaluation length (:mod:`lengen.eval.perplexity`). Runs under
``torch.inference_mode`` with the model in eval mode, so dropout is off and attention takes its
memory-lean path. Tasks with an ``output_slice`` are scored over their output classes only (see
:mod:`lengen.eval.metrics`).

Reproducible by construction: the evaluated sequences are a function of (seed, split, index)
(:meth:`lengen.tasks.base.Task.eval_batches`), and a sampler that draws positions at evaluation
(``random_at_eval``, e.g. randomized positions) draws them once per block of ``EVAL_BLOCK``
sequences from a generator seeded by (seed, split, block), passed to the model explicitly. So the
numbers do not depend on the evaluation batch size, and evaluation never draws from torch's global
RNG (periodic evaluation cannot shift training).
"""
from __future__ import annotations

import torch
from tqdm.auto import tqdm

from lengen.errors import ArgumentError, ConfigError
from lengen.eval.metrics import batch_stats, finalize, restrict_to_outputs
from lengen.eval.perplexity import evaluate_perplexity
from lengen.model.memory import check_work, forward_checks_once
# the evaluation stream is shared with the perplexity protocol, which evaluate() dispatches to
from lengen.eval.stream import block_positions, eval_stream, forward  # noqa: F401
from lengen.tasks.base import check_eval_sizes, reads_with


@torch.inference_mode()
def evaluate_split(model, task, split: str, n_sequences: int, batch_size: int, seed: int,
                   device="cpu") -> dict:
    check_eval_sizes(n_sequences, batch_size, seed)
    was_training = model.training
    model.eval()
    total = None
    length = 0
    try:
        for _, batch, pos in eval_stream(model, task, split, n_sequences, batch_size, seed, device):
            length = max(length, batch.inputs.shape[1])
            logits, targets = restrict_to_outputs(forward(model, batch.inputs, pos), batch.targets,
                                                  getattr(task, "output_slice", None),
                                                  batch.eval_mask)
            s = batch_stats(logits, targets, batch.eval_mask)
            total = s if total is None else {k: total[k] + s[k] for k in total}
    finally:
        model.train(was_training)
    out = finalize(total)
    out["length"] = length
    return out


def sequences_evaluated(task, sequences: int, length: int) -> int:
    """How many sequences of ``length`` tokens evaluating ``sequences`` really runs: a task
    that scores at most ``max_eval_tokens`` per length (text) evaluates that many windows."""
    cap = getattr(task, "max_eval_tokens", None)
    return min(sequences, -(-max(cap, length) // length)) if cap else sequences


def check_evaluation_work(mc, task, splits, sequences: int, *, device="cpu", what: str = "",
                          fix: str = "") -> float:
    """Refuse, before the first batch, an evaluation of ``sequences`` per split that cannot
    finish in reasonable time (:func:`lengen.model.memory.check_work`): the one bound ``lengen
    eval`` and training's final and periodic evaluations share. A task that scores at most
    ``max_eval_tokens`` per length (text) evaluates that many windows whatever ``sequences``
    asks. -> the estimated floating-point operations."""
    lengths = [task.max_input_length([s]) for s in splits]
    counts = [sequences_evaluated(task, sequences, L) for L in lengths]
    return check_work(mc, sequences=counts, length=lengths, device=device,
                      what=what or f"evaluating {len(splits)} split(s) x {sequences} sequences",
                      fix=fix)


def check_evaluate_args(model, task, splits, meta) -> list:
    """The arguments of :func:`evaluate` checked (an ArgumentError saying what to pass); returns
    the splits as a list (a bare string is one split)."""
    if not isinstance(model, torch.nn.Module):
        raise ArgumentError(f"evaluate needs a model (a lengen Transformer, e.g. from "
                            f"lengen.load_run), got {type(model).__name__}")
    if not all(hasattr(task, a) for a in ("eval_batches", "check_split", "splits")):
        raise ArgumentError(f"evaluate needs a task (lengen.build_task(name) or from "
                            f"lengen.load_run), got {type(task).__name__}")
    if isinstance(splits, str):
        splits = [splits]
    if (isinstance(splits, (bytes, dict)) or not isinstance(splits, (list, tuple))
            or not all(isinstance(s, str) for s in splits)):
        raise ArgumentError(f"splits must be a list of split names such as {task.splits()[:3]}, "
                            f"got {splits!r}")
    if not splits:
        raise ConfigError(f"no splits given; pass some of {', '.join(task.splits())}")
    mc = getattr(model, "cfg", None)
    causal, wants = getattr(mc, "causal", None), getattr(task, "causal", None)
    if isinstance(causal, bool) and isinstance(wants, bool) and not reads_with(task, causal):
        # an encoder sees the answer it is scored on (or a decoder the wrong protocol): the
        # numbers would be meaningless, not low
        raise ConfigError(f"the model is {'a causal decoder' if causal else 'a bidirectional encoder'}"
                          f" (model.causal={str(causal).lower()}) and task "
                          f"'{getattr(task, 'name', type(task).__name__)}' needs "
                          f"{'a causal decoder' if wants else 'a bidirectional encoder'}; evaluate "
                          f"it on a task of its kind (the task it was trained on)")
    if meta is not None and not isinstance(meta, dict):
        raise ArgumentError(f"meta must be a dict of extra row columns or None, got "
                            f"{type(meta).__name__}")
    return list(splits)


def evaluate(model, task, splits: list[str], *, n_sequences: int, batch_size: int, seed: int = 1234,
             device="cpu", meta: dict | None = None, progress: bool = False) -> list[dict]:
    """Evaluate on each split; returns long-format rows (one per split x metric). Tasks whose
    ``evaluation`` is ``"perplexity"`` (language modelling) get rows ``ppl`` and ``nll`` per
    length from :func:`lengen.eval.perplexity.evaluate_perplexity` instead. The model's
    per-call size check (:func:`lengen.model.memory.check_forward`) runs once per batch shape,
    not once per batch (:func:`lengen.model.memory.forward_checks_once`)."""
    with forward_checks_once():
        return _evaluate(model, task, splits, n_sequences=n_sequences, batch_size=batch_size,
                         seed=seed, device=device, meta=meta, progress=progress)


def _evaluate(model, task, splits, *, n_sequences, batch_size, seed, device, meta, progress):
    check_eval_sizes(n_sequences, batch_size, seed)
    splits = check_evaluate_args(model, task, splits, meta)
    if getattr(task, "evaluation", "accuracy") == "perplexity":
        return evaluate_perplexity(model, task, splits, n_sequences=n_sequences,
                                   batch_size=batch_size, seed=seed, device=device, meta=meta,
                                   progress=progress)
    for split in splits:
        try:
            task.check_split(split)
        except ConfigError:
            raise
        except ValueError as e:
            raise ConfigError(str(e)) from None
    rows = []
    it = splits
    if progress:
        it = tqdm(splits, desc="eval", leave=False)
    for split in it:
        r = evaluate_split(model, task, split, n_sequences, batch_size, seed, device)
        base = dict(meta or {}, split=split, length=r["length"], sequences=r["sequences"],
                    tokens=r["tokens"])
        for metric in ("seq_acc", "token_acc", "nll"):
            rows.append(dict(base, metric=metric, value=r[metric]))
        rows.append(dict(base, metric="glitch_rate", value=1 - r["token_acc"]))
    return rows
