"""Table A of the index-warping paper on two seeds (issue 27 item 5): per task and column, the
Table A average over the fitted runs of seeds 0 and 1, and "ours beats X" for X in RoPE,
RoPE+PI, ALiBi and R.P. (3M), judged by the rule in this folder's README (written before the
seed-1 runs of those columns started). The per-seed reading and the rule's test are
``fig6_seeds.per_seed`` and ``fig6_seeds.verdict`` with 2 fitted seeds required.

    PYTHONPATH=. python experiments/index-warping-cpu/table_a_seeds.py TASKS OUT_STEM ROWS.csv [MORE.csv ...]

TASKS: comma-separated (``copy,reverse,sort``). Writes ``OUT_STEM.csv`` (one row per task x
column x seed) and ``OUT_STEM.md`` (means, stds, fitted counts and verdicts).
"""
from __future__ import annotations

import csv
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fig6_seeds import FIT, mean_std, per_seed, verdict

from lengen.fileio import write_csv_atomic, write_text_atomic

COLUMNS = {"rope": "RoPE", "rope_pi": "RoPE+PI", "alibi": "ALiBi", "rpe_3m": "R.P. (3M)",
           "ours_sqrt": "ours"}
NEED = 2                        # fitted seeds per column for a verdict (the README's rule)


def main(tasks: str, stem: str, paths) -> int:
    rows = []
    for p in paths:
        with open(p, newline="") as f:
            rows += [r for r in csv.DictReader(f) if r.get("status", "ok") in ("ok", "")]
    tasks = tasks.split(",")
    recs = per_seed(rows, tasks, COLUMNS)
    write_csv_atomic(recs, stem + ".csv")
    lines = [f"Fitted: seen-length average >= {FIT:g} %. Means ± sample std over the fitted "
             "runs; a verdict needs 2 fitted seeds in both columns.", "",
             "| task | column | seeds run | fitted | Table A average, fitted | unseen, fitted |",
             "|---|---|---|---|---|---|"]
    fitted = {}
    for task in tasks:
        for label in COLUMNS.values():
            rr = [r for r in recs if r["task"] == task and r["column"] == label]
            ok = [r for r in rr if r["fits"]]
            fitted[task, label] = [r["all"] for r in ok]

            def ms(key, ok=ok):
                return mean_std([r[key] for r in ok])
            lines.append(f"| {task} | {label} | {len(rr)} ({', '.join(str(r['seed']) for r in rr)})"
                         f" | {len(ok)} | {ms('all')} | {ms('unseen')} |")
    others = [c for c in COLUMNS.values() if c != "ours"]
    lines += ["", "| task | " + " | ".join(f"ours > {c}" for c in others) + " |",
              "|---" * (len(others) + 1) + "|"]
    for task in tasks:
        lines.append(f"| {task} | " + " | ".join(
            verdict(fitted[task, "ours"], fitted[task, c], NEED) for c in others) + " |")
    write_text_atomic("\n".join(lines) + "\n", stem + ".md")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
