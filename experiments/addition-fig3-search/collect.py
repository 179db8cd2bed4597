"""Fig. 3 budget search for the addition cpu scale (issue 27 item 1): curves and a summary.

    python experiments/addition-fig3-search/collect.py CURVES_OUT RUN_DIR [RUN_DIR ...]
    python experiments/addition-fig3-search/collect.py --summary

The runs are ``experiments/addition-cpu/probe.py`` runs (one setting, lr, steps, batch, seed,
device). The first form reads each run directory's ``metrics.jsonl`` (greedy exact match at
lengths 3, 6, 10, 13, 16 on 64 sequences every 500 steps) and writes one row per (run, step,
length) to CURVES_OUT, finished or not: a run cut off by the GPU lease's time limit keeps its
curve. ``--summary`` reads this folder's ``search-*.jsonl`` (the finished runs, EM at every
length 1..20 on 100 sequences) and ``curves-*.csv`` and writes ``summary.csv``: one row per run
with its budget, whether it finished, mean EM on 1..10 (in distribution) and 11..20 (beyond),
``fitted`` (mean EM on 1..10 >= 95 %, the issue's rule) and, for a run that did not finish, its
last curve point.
"""
from __future__ import annotations

import glob
import json
import os
import sys

import pandas as pd

HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "results", "addition-fig3-search")   # the results folder this script reads and writes
FIT = 95.0          # % mean EM on 1..10: the rule for "fits its training lengths"


def parse_name(name: str) -> dict:
    """``fire-lr0.003-st8000-d64-L2-b128-s2`` -> setting, lr, steps, batch, seed."""
    parts = name.split("-")
    seed = int(parts[-1][1:]) if parts[-1].startswith("s") and parts[-1][1:].isdigit() else 0
    setting = parts[0]
    kv = {p[:2]: p[2:] for p in parts[1:]}
    return dict(setting=setting, lr=float(name.split("-lr")[1].split("-")[0]),
                steps=int(kv["st"]), batch=int(name.split("-b")[-1].split("-")[0]), seed=seed)


def curves(out: str, run_dirs: list[str]) -> None:
    rows = []
    for run in run_dirs:
        name = os.path.basename(run.rstrip("/"))
        meta = parse_name(name)
        device = json.load(open(os.path.join(run, "config.json")))["train"]["device"]
        for line in open(os.path.join(run, "metrics.jsonl")):
            rec = json.loads(line)
            for k, v in rec.items():
                if k.startswith("eval/len=") and k.endswith("/seq_acc"):
                    rows.append(dict(run=name, device=device, **meta, step=rec["step"],
                                     length=int(k.split("=")[1].split("/")[0]),
                                     em=round(100 * v, 1)))
    pd.DataFrame(rows).to_csv(out, index=False)


def summary() -> pd.DataFrame:
    done = []
    for path in sorted(glob.glob(os.path.join(HERE, "search-*.jsonl"))):
        for line in open(path):
            r = json.loads(line)
            em = r["em"]
            done.append(dict(run=r["name"], device=r["device"], setting=r["setting"], lr=r["lr"],
                             steps=r["steps"], batch=r["batch"], seed=r["seed"], finished=True,
                             minutes=r["minutes"],
                             em_1_10=round(sum(em[f"len={k}"] for k in range(1, 11)) / 10, 1),
                             em_11_20=round(sum(em[f"len={k}"] for k in range(11, 21)) / 10, 1)))
    done = pd.DataFrame(done)
    c = pd.concat([pd.read_csv(p) for p in sorted(glob.glob(os.path.join(HERE, "curves-*.csv")))])
    rows = done.to_dict("records")
    finished = {(r["run"], r["device"]) for r in rows}
    for (run, device), g in c.groupby(["run", "device"]):
        if (run, device) in finished:
            continue
        last = g[g.step == g.step.max()]
        rows.append(dict(run=run, device=device, **parse_name(run), finished=False,
                         stopped_at=int(g.step.max()),
                         last_curve=" ".join(f"{int(r.length)}:{r.em:g}" for r in
                                             last.sort_values("length").itertuples())))
    s = pd.DataFrame(rows)
    s["fitted"] = [("yes" if e >= FIT else "no") if f else "unfinished"
                   for e, f in zip(s.em_1_10, s.finished)]
    s = s.sort_values(["setting", "batch", "steps", "seed", "device"])
    s.to_csv(os.path.join(HERE, "summary.csv"), index=False)
    return s


if __name__ == "__main__":
    if sys.argv[1] == "--summary":
        print(summary().to_string())
    else:
        curves(sys.argv[1], sys.argv[2:])
