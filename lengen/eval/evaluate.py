"""Evaluation on named splits -> pandas-friendly rows.

Each row: ``{run, task, split, length, metric, value, pe, attention, positions, seed, data_seed,
step}`` for metrics ``seq_acc`` (whole-sequence accuracy), ``token_acc`` (per-read accuracy for
flip-flop), ``glitch_rate`` (1 - token_acc) and ``nll``; language-modelling tasks get ``ppl``
and ``nll`` per evaluation length (:mod:`lengen.eval.perplexity`). Runs under
``torch.inference_mode`` with the model in eval mode, so dropout is off and attention takes its
memory-lean path. Tasks with an ``output_slice`` are scored over their output classes only (see
:mod:`lengen.eval.metrics`).
"""
from __future__ import annotations

import csv
import io
import os

import torch

from lengen.eval.metrics import batch_stats, finalize, restrict_to_outputs


@torch.inference_mode()
def evaluate_split(model, task, split: str, n_sequences: int, batch_size: int, seed: int,
                   device="cpu") -> dict:
    was_training = model.training
    model.eval()
    gen = torch.Generator().manual_seed(seed)
    total = None
    length = 0
    try:
        for batch in task.eval_batches(split, n_sequences, batch_size, gen):
            batch = batch.to(device)
            length = max(length, batch.inputs.shape[1])
            logits, targets = restrict_to_outputs(model(batch.inputs), batch.targets,
                                                  getattr(task, "output_slice", None),
                                                  batch.eval_mask)
            s = batch_stats(logits, targets, batch.eval_mask)
            total = s if total is None else {k: total[k] + s[k] for k in total}
    finally:
        model.train(was_training)
    out = finalize(total)
    out["length"] = length
    return out


def evaluate(model, task, splits: list[str], *, n_sequences: int, batch_size: int, seed: int = 1234,
             device="cpu", meta: dict | None = None, progress: bool = False) -> list[dict]:
    """Evaluate on each split; returns long-format rows (one per split x metric). Tasks whose
    ``evaluation`` is ``"perplexity"`` (language modelling) get rows ``ppl`` and ``nll`` per
    length from :func:`lengen.eval.perplexity.evaluate_perplexity` instead."""
    if getattr(task, "evaluation", "accuracy") == "perplexity":
        from lengen.eval.perplexity import evaluate_perplexity

        return evaluate_perplexity(model, task, splits, n_sequences=n_sequences,
                                   batch_size=batch_size, seed=seed, device=device, meta=meta,
                                   progress=progress)
    for split in splits:
        task.check_split(split)
    rows = []
    it = splits
    if progress:
        from tqdm.auto import tqdm

        it = tqdm(splits, desc="eval", leave=False)
    for split in it:
        r = evaluate_split(model, task, split, n_sequences, batch_size, seed, device)
        base = dict(meta or {}, split=split, length=r["length"], sequences=r["sequences"],
                    tokens=r["tokens"])
        for metric in ("seq_acc", "token_acc", "nll"):
            rows.append(dict(base, metric=metric, value=r[metric]))
        rows.append(dict(base, metric="glitch_rate", value=1 - r["token_acc"]))
    return rows


def rows_to_csv(rows: list[dict]) -> str:
    keys = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=keys)
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def write_text_atomic(text: str, path: str) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
