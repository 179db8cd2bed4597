"""Length sweeps: one row per test length, the accuracy-vs-length curve, and a task score.

Every task with ``len=K`` splits can be swept: the Chomsky encoder tasks (K = input length) and the
decoder sequence tasks (K = number of items; :mod:`lengen.tasks.sequence`). Each task names the
per-length metric its papers report in ``task.score_metric`` (:func:`score_metric`):

* Chomsky tasks (Deletang et al. 2023; Ruoss et al. 2023): ``token_acc``, per-token argmax over
  the task's output classes, pooled over the sequences of that length, counting only the scored
  output positions (``eval_mask``). Train on input lengths 1..N, evaluate at every length
  n = N+1..M (one batch per length), and score a model by the *unweighted mean over those
  lengths*. The reference code's range evaluation starts at N+2 by an off-by-one; the score here
  starts at N+1, as the paper states.
* decoder sequence tasks (index-warping paper, Kazemnejad et al. 2023): ``seq_acc``, exact match of
  answer + EOS (teacher forced, which equals greedy-decoding exact match), at every length
  2..5M, seen and unseen alike; the paper's Table A averages it over all test lengths
  (``length_scores(rows, min_length=2, metric="seq_acc")``).

At small scales the sweep may use a strided subset of lengths (:func:`sweep_lengths` always keeps
both ends); say so wherever the score is reported. Lengths inside the training range can be
evaluated too (for accuracy-vs-length curves showing the in-distribution part); the Chomsky score
never counts them. :func:`lengen.analysis.length_curves.plot_length_curves` draws the curves with
the training range shaded.

Evaluation runs with the model in eval mode: dropout off (the reference leaves it on at test time;
we do not). Position samplers follow their documented ``eval_mode``: Ruoss et al.'s randomized
positions keep drawing a fresh sorted subset of [0, L) at test time
(``RandomizedSampler(eval_mode='randomized')``, the default; one draw per block of evaluation
sequences from a generator seeded by (seed, split, block), so a length's score does not depend on
the batch size), or use 0..T-1 with ``'identity'``.

    lengths = sweep_lengths(41, 500, stride=20)              # 41, 61, ..., 481, 500
    rows = evaluate_lengths(model, task, lengths, n_sequences=500, batch_size=100)
    length_scores(rows, min_length=41)                       # [{'run': ..., 'score': ..., ...}]
    length_scores(rows, min_length=2, metric=score_metric(copy_task))   # a sequence task
"""
from __future__ import annotations

from typing import Iterable, Sequence

from lengen.eval.evaluate import evaluate
from lengen.tasks.splits import length_splits, parse_split


def sweep_lengths(min_length: int, max_length: int, stride: int = 1) -> list[int]:
    """``min_length, min_length + stride, ...`` up to ``max_length``, always ending at
    ``max_length`` (stride 1 = every length)."""
    if min_length < 1 or max_length < min_length:
        raise ValueError(f"need 1 <= min_length <= max_length, got {min_length}, {max_length}")
    if stride < 1:
        raise ValueError(f"stride must be >= 1, got {stride}")
    out = list(range(min_length, max_length + 1, stride))
    if out[-1] != max_length:
        out.append(max_length)
    return out


def score_metric(task) -> str:
    """The per-length metric ``task`` is scored by: ``task.score_metric`` (``token_acc`` for the
    Chomsky tasks, ``seq_acc`` for the decoder sequence tasks); ``token_acc`` if it names none."""
    return getattr(task, "score_metric", "token_acc")


def add_lengths(rows: Iterable[dict]) -> list[dict]:
    """Copies of ``rows`` with ``n`` (the test length K parsed from the ``len=K`` split). A row's
    ``length`` column is the model input length instead (with output placeholders for an encoder
    task, with prompt and answer for a sequence task).
    Rows without a split (failed runs) are kept as they are."""
    out = []
    for r in rows:
        r = dict(r)
        if r.get("split") is not None:
            r["n"] = parse_split(r["split"])
        out.append(r)
    return out


def evaluate_lengths(model, task, lengths: Sequence[int], *, n_sequences: int, batch_size: int,
                     seed: int = 1234, device="cpu", meta: dict | None = None,
                     progress: bool = False) -> list[dict]:
    """Evaluate ``model`` at each test length K; rows as :func:`lengen.eval.evaluate` plus ``n``.
    A length the model cannot encode is a ValueError before any evaluation."""
    model.check_length(task.max_input_length(length_splits(lengths)))
    return add_lengths(evaluate(model, task, length_splits(lengths), n_sequences=n_sequences,
                                batch_size=batch_size, seed=seed, device=device, meta=meta,
                                progress=progress))


def _ok(r: dict, metric: str) -> bool:
    return (r.get("metric") == metric and r.get("status", "ok") == "ok"
            and r.get("value") is not None)


def length_scores(rows: Iterable[dict], *, min_length: int, max_length: int | None = None,
                  metric: str = "token_acc", by: Sequence[str] = ("run",)) -> list[dict]:
    """Score per group of ``by`` (default: per run) = unweighted mean of ``metric`` over the
    lengths ``min_length <= n <= max_length`` present in the rows (the paper's score with
    ``min_length = N + 1``). Each result: the ``by`` columns, ``score``, ``n_lengths`` and the
    shortest/longest length used, in the order groups first appear."""
    groups: dict[tuple, dict[int, float]] = {}
    for r in add_lengths(r for r in rows if _ok(r, metric)):
        n = r["n"]
        if n < min_length or (max_length is not None and n > max_length):
            continue
        key = tuple(r.get(c) for c in by)
        per_len = groups.setdefault(key, {})
        if n in per_len:
            raise ValueError(f"two '{metric}' rows for length {n} in group {dict(zip(by, key))}; "
                             f"add the distinguishing column(s) to by={tuple(by)}")
        per_len[n] = float(r["value"])
    return [dict(zip(by, key), score=sum(v.values()) / len(v), n_lengths=len(v),
                 min_n=min(v), max_n=max(v)) for key, v in groups.items()]


def length_curves(rows: Iterable[dict], *, metric: str = "token_acc",
                  by: Sequence[str] = ("run",)) -> dict[tuple, tuple[list[int], list[float]]]:
    """``{group key: (lengths ascending, values)}`` of ``metric`` per group of ``by``."""
    curves: dict[tuple, dict[int, float]] = {}
    for r in add_lengths(r for r in rows if _ok(r, metric)):
        curves.setdefault(tuple(r.get(c) for c in by), {})[r["n"]] = float(r["value"])
    return {k: (sorted(v), [v[n] for n in sorted(v)]) for k, v in curves.items()}


__all__ = ["sweep_lengths", "length_splits", "score_metric", "add_lengths", "evaluate_lengths", "length_scores",
           "length_curves"]
