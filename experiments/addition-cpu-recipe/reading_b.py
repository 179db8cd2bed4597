"""The second protocol reading of this folder's README: the runs whose positions are randomized,
evaluated again with positions 0..T-1 (as the public reimplementation mcleish7/arithmetic does),
and the recipe's report made again from those rows.

    PYTHONPATH=. python experiments/addition-cpu-recipe/reading_b.py RECIPE_OUT [SCALE [OUT]]

RECIPE_OUT is the recipe's ``--out`` (its ``results.csv`` and run directories); SCALE defaults
to cpu. For every run there whose setting trains with randomized positions it writes
``RUN/eval-identity.json`` / ``.csv`` (``lengen.runs.evaluate_run(..., positions='identity')``:
the run's own test lengths, sequences and evaluation seed, so the same sequences) and
``RUN/errors-identity.json`` (the recipe's error analysis with the same positions); both are
reused when present. Then it writes this folder's ``reading_b/`` (``scores.csv``, ``table.md/
.csv``, ``claims.md/.csv``, ``errors.md/.csv``, the figures; or OUT) by the recipe's own report code,
with those rows in place of the randomized runs' own and every other run's rows unchanged.
"""
from __future__ import annotations

import csv
import json
import os
import sys

import torch

from lengen import load_run
from lengen.eval.addition_errors import addition_error_analysis
from lengen.fileio import save_json_atomic
from lengen.recipes.addition import SETTINGS, analysis_settings, write_report
from lengen.runs import build_sampler_checked, evaluate_run

HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "results", "addition-cpu-recipe")   # the results folder this script reads and writes
TAGS = ("setting", "label", "N", "seed", "data_seed", "group", "status")
#: metrics of the recipe's error analysis (the rows its claims read)
ERROR_METRICS = ("acc_with_carry", "acc_without_carry", "digit_acc_carry_in",
                 "digit_acc_no_carry_in", "single_digit_error_share", "premature_rate",
                 "seq_acc_generated")


def _num(v):
    try:
        f = float(v)
    except (TypeError, ValueError):
        return v
    return int(f) if f.is_integer() and "." not in str(v) else f


def read_rows(path: str) -> list[dict]:
    with open(path) as f:
        return [{k: (_num(v) if v != "" else None) for k, v in r.items()}
                for r in csv.DictReader(f)]


def identity_errors(run_dir: str, name: str, analysis: dict) -> list[dict]:
    """The recipe's error analysis of a run with positions 0..T-1 (cached)."""
    path = os.path.join(run_dir, "errors-identity.json")
    if os.path.exists(path):
        with open(path) as f:
            return json.load(f)["rows"]
    cfg, task, model = load_run(run_dir, device="cpu")
    model.sampler, _ = build_sampler_checked("identity", {}, task=task,
                                             splits=analysis["error_splits"])
    with torch.random.fork_rng(devices=[]):
        rows, _ = addition_error_analysis(model, task, analysis["error_splits"],
                                          n_sequences=analysis["error_sequences"],
                                          seed=analysis["seed"],
                                          batch_size=cfg.eval.batch_size, device="cpu",
                                          meta={"run": name})
    save_json_atomic({"rows": rows}, path)
    return rows


def main(recipe_out: str, scale: str = "cpu", out: str | None = None) -> None:
    rows = read_rows(os.path.join(recipe_out, "results.csv"))
    tags = {}
    for r in rows:
        tags.setdefault(r["run"], {k: r.get(k) for k in TAGS})
    randomized = sorted(name for name, t in tags.items() if t["status"] == "ok"
                        and SETTINGS[t["setting"]]["positions"] == "randomized")
    analysis = analysis_settings(scale, "cpu")
    new = [r for r in rows if r["run"] not in randomized
           or r["metric"] not in ("seq_acc",) + ERROR_METRICS]
    for name in randomized:
        run_dir = os.path.join(recipe_out, name)
        path = os.path.join(run_dir, "eval-identity.json")
        if os.path.exists(path):
            with open(path) as f:
                got = json.load(f)
        else:
            got = evaluate_run(run_dir, positions="identity", out="eval-identity", plot=False)
        got = [r for r in got if r.get("metric") == "seq_acc"]
        got += [r for r in identity_errors(run_dir, name, analysis)
                if r.get("metric") in ERROR_METRICS]
        new += [dict(r, run=name, **tags[name]) for r in got]
        print(f"{name}: positions 0..T-1, {len(got)} rows")
    out = out or os.path.join(HERE, "reading_b")
    os.makedirs(out, exist_ok=True)
    write_report(new, out, scale=scale, caption=(
        f"Second protocol reading: the {len(randomized)} runs trained with randomized positions "
        f"evaluated with positions 0..T-1 (their error analysis too); every other run as the "
        f"recipe evaluated it. Runs: {recipe_out}."), log=lambda *a, **k: None)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(*sys.argv[1:])
