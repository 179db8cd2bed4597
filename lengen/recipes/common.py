"""What every sweep recipe shares: command-line arguments (``lengen reproduce <recipe> --help``),
the choice of a training device, the check of selected names, the ``train`` section of a run
config, the report of failed runs."""
from __future__ import annotations

import json
import os
import warnings

import torch

from lengen.analysis.tables import markdown_table
from lengen.cliutil import int_at_least
from lengen.errors import LengenWarning
from lengen.fileio import write_text_atomic
from lengen.rundir.layout import read_stored_config
from lengen.runs import evaluate_run
from lengen.sweep.local import write_results


def add_sweep_arguments(p, name: str, *, scale_help: str, seeds_help: str,
                        scales=("smoke", "cpu", "paper")) -> None:
    """--scale (one of ``scales``), --out, --workers, --seeds, --backend, --threads, --device,
    --estimate."""
    p.add_argument("--scale", choices=tuple(scales), default="cpu",
                   help="sizes and steps (the protocol is unchanged): " + scale_help)
    p.add_argument("--out", metavar="DIR", default=None,
                   help=f"output folder (default runs/{name}-<scale>)")
    p.add_argument("--workers", type=int_at_least(1), default=1, metavar="N",
                   help="parallel worker processes (default 1: one run after another)")
    p.add_argument("--seeds", type=int_at_least(0), nargs="+", default=None, metavar="S",
                   help=seeds_help)
    p.add_argument("--backend", choices=("local", "ray"), default="local",
                   help="local processes (default) or Ray tasks (needs: pip install ray)")
    p.add_argument("--threads", type=int_at_least(0), default=None, metavar="N",
                   help="torch threads per run (default: lengen's choice within each worker's "
                        "share of the cores: 1 for models of d_model <= 256 on CPU)")
    p.add_argument("--device", default=None,
                   help="torch device for training (default: cuda at paper scale if present, "
                        "else cpu)")
    p.add_argument("--estimate", action="store_true",
                   help="time a few training steps (and an evaluation batch) per run on this "
                        "machine and print the estimated total wall time instead of running")


def add_corpus_arguments(q) -> None:
    """--corpus and --data-dir of the language-modelling recipes."""
    q.add_argument("--corpus", default=None, metavar="NAME",
                   help="corpus instead of the scale's (kjv for smoke/cpu, wikitext-103 for "
                        "paper), e.g. wikitext-103 with --data-dir")
    q.add_argument("--data-dir", default=None, metavar="DIR",
                   help="folder with the WikiText files (the hub's Parquet layout or "
                        "wiki.{train,valid,test}.raw); without it WikiText is loaded with "
                        "`datasets` (needs the internet)")


def default_device(scale: str) -> str:
    """cuda at the GPU-sized scales (paper, width, gpu) when a GPU is present, else cpu (cpu and
    smoke scales are sized for a CPU). A GPU-sized scale on a machine without one warns: its
    models are the papers' widths and lengths, seconds per step on a CPU."""
    if scale not in ("paper", "width", "gpu"):
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    warnings.warn(f"--scale {scale} is sized for a GPU and none is visible: its runs will take "
                  f"seconds per step on this CPU (hours to days in all); run --estimate first, "
                  f"or use --scale cpu", LengenWarning, stacklevel=2)
    return "cpu"


def select(given, valid, default, what: str) -> list:
    """``given`` (or ``default`` when None / empty) as a list, every name checked against
    ``valid``; ValueError ``unknown <what>(s) [...]. Valid: ...`` otherwise."""
    chosen = list(given or default)
    bad = [x for x in chosen if x not in valid]
    if bad:
        raise ValueError(f"unknown {what}(s) {bad}. Valid: {', '.join(valid)}")
    return chosen


def parse_part(text: str) -> tuple[int, int]:
    """``"K/N"`` -> (K, N) with 1 <= K <= N (``--part``); ValueError saying what is wrong."""
    try:
        k, n = (int(x) for x in str(text).split("/"))
    except ValueError:
        raise ValueError(f"--part takes K/N (part K of N, e.g. 2/3), got {text!r}") from None
    if not 1 <= k <= n:
        raise ValueError(f"--part {text}: K must be between 1 and N")
    return k, n


def part_of(specs: list, part: tuple[int, int] | None, key=None) -> list:
    """Part K of N of a grid's runs: sorted by ``key`` (default: grid order), then cut into N
    contiguous pieces as equal as possible (the first ones one run longer), so that the N parts
    together run every run once; None -> every run."""
    if part is None:
        return list(specs)
    k, n = part
    ordered = sorted(specs, key=key) if key is not None else list(specs)
    size, extra = divmod(len(ordered), n)
    start = (k - 1) * size + min(k - 1, extra)
    return ordered[start:start + size + (1 if k <= extra else 0)]


def write_md(path: str, title: str, caption: str, grid, note: str = "", *,
             label_columns: int = 1) -> None:
    """A report table: bold title, caption, the Markdown table of ``grid`` (header row first;
    the first ``label_columns`` columns left-aligned, the rest right-aligned) and an optional
    note, written atomically."""
    align = "l" * label_columns + "r" * (len(grid[0]) - label_columns)
    text = f"**{title}**\n\n{caption}\n\n{markdown_table(grid, align=align)}\n"
    write_text_atomic(text + (f"\n{note}\n" if note else ""), path)


def train_section(s: dict, seed: int, device: str, *, log_every: int, base: dict | None = None,
                  copy=(), data_seed: int | None = None, **keys) -> dict:
    """The ``train`` section of a run config at scale ``s``: ``base`` (a paper's fixed training
    settings), the scale's ``steps`` and ``batch_size``, the scale's values of the keys named in
    ``copy`` (tuples as lists, as a stored config.json reads them back), ``keys``, then ``seed``
    (initialisation; also the data order unless ``data_seed`` is given), the scale's
    ``ckpt_every``, ``log_every`` and ``device``."""
    out = dict(base or {}, steps=s["steps"], batch_size=s["batch_size"])
    out.update((k, list(s[k]) if isinstance(s[k], tuple) else s[k]) for k in copy)
    out.update(keys)
    out.update(seed=seed, data_seed=seed if data_seed is None else data_seed,
               ckpt_every=s["ckpt_every"], log_every=log_every, device=device)
    return out


def log_failures(failures: list, out: str, log=print) -> None:
    """Say how many runs failed and how to retry them (nothing when none did)."""
    if failures:
        log(f"{len(failures)} run(s) failed; see {os.path.join(out, 'failures.json')}. Rerun "
            f"the same command to retry them (finished runs are reused).")


def trained_columns(columns, eval_only: dict) -> list[str]:
    """The columns to train for a selection: an evaluation-only column (``eval_only``: column ->
    the column whose runs it evaluates again, e.g. RoPE+PI -> RoPE) adds its base instead."""
    out = []
    for c in columns:
        base = eval_only.get(c, c)
        if base not in out:
            out.append(base)
    return out


def add_eval_only_rows(rows: list, res, specs, out: str, wanted: dict, evaluate, *,
                       log=print) -> tuple[list, list]:
    """``rows`` (the sweep's) plus the evaluation-only columns: for each finished run whose
    column is a base in ``wanted`` (column -> base column), ``evaluate(spec, column)`` gives the
    rows, tagged like the sweep's (the run's tags, ``model=column``, ``status=ok``). A failing
    evaluation is reported like a failed run and the rest kept. When the rows or failures differ
    from the sweep's, ``results.json`` / ``results.csv`` / ``failures.json`` are rewritten.
    -> (rows, failures)."""
    rows, failures = list(rows), list(res.failures)
    for spec in specs:
        done = res.status.get(spec.name, {}).get("status") in ("done", "cached")
        for col in [c for c, base in wanted.items() if base == spec.tags["model"] and done]:
            try:
                tags = {**spec.tags, "model": col, "status": "ok"}
                rows += [{**r, **tags} for r in evaluate(spec, col)]
            except Exception as e:  # noqa: BLE001 - reported like a failed run; the rest is kept
                failures.append({"name": f"{spec.name} ({col})",
                                 "error": f"{type(e).__name__}: {e}"})
                log(f"{col} evaluation of {spec.name} failed: {type(e).__name__}: {e}")
    if rows != res.rows or failures != res.failures:
        write_results(out, rows, failures)
    return rows, failures


def eval_with_positions(run_dir: str, positions: str, kwargs: dict, *, stem: str,
                        splits=None, device: str = "cpu", log=print) -> list[dict]:
    """Rows of a finished run's weights evaluated with another position sampler (e.g. RoPE+PI:
    a RoPE run evaluated with ``interpolate``; training would be identical, PI being the
    identity in training, so the recipes evaluate the RoPE run rather than train it twice).
    Read back from ``RUN_DIR/<stem>.json`` when it holds this very evaluation of the current
    weights (same sampler, kwargs, splits and the run's stored ``eval`` settings, which a sweep
    may change without retraining; written after the weights), else evaluated and written there
    (:func:`lengen.runs.evaluate_run`)."""
    path = os.path.join(run_dir, f"{stem}.json")
    stored_eval = (read_stored_config(run_dir) or {}).get("eval")
    stamp = json.dumps({"positions": positions, "positions_kwargs": kwargs,
                        "splits": None if splits is None else list(splits),
                        "eval": stored_eval}, sort_keys=True, default=str)
    weights = os.path.join(run_dir, "model.safetensors")
    try:
        with open(path) as f:
            rows = json.load(f)
        if (os.path.getmtime(path) >= os.path.getmtime(weights) and rows
                and all(r.get("eval_stamp") == stamp for r in rows)):
            return rows
    except (OSError, ValueError):
        pass
    log(f"evaluating {os.path.basename(run_dir)} with positions={positions} {kwargs}")
    return evaluate_run(run_dir, positions=positions, positions_kwargs=kwargs, out=stem,
                        splits=splits, plot=False, device=device, columns={"eval_stamp": stamp})


def exit_code(result: dict) -> int:
    """1 when some run of the sweep (or an evaluation the recipe added, ``result["failures"]``)
    failed (the rest finished and were tabulated), else 0."""
    return 1 if result.get("failures", result["sweep"].failures) else 0


__all__ = ["add_corpus_arguments", "add_sweep_arguments", "add_eval_only_rows", "default_device",
           "eval_with_positions", "log_failures", "trained_columns", "train_section", "exit_code",
           "select", "write_md", "parse_part", "part_of"]
