"""Training-loss curves of this probe's runs (seeds 3..9), from the run folders' metrics.jsonl,
which are not committed: ``python losses.py DIR`` (DIR = the probe's ``--out``) writes
``losses.csv``: one row per run and logged step that is a multiple of 250, and per run the first
logged step (every 50) whose training loss is below 0.25 (``below_025``; empty when none), about
halfway between the plateau's loss (near 0.5) and a fitted run's (near 0)."""
import csv
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main(out: str) -> None:
    runs = list(csv.DictReader(open(os.path.join(HERE, "runs.csv"), newline="")))
    rows = []
    for r in runs:
        name = f"{r['variant']}--addition--s{r['seed']}--lr{float(r['lr']):g}"
        logged = [json.loads(line) for line in open(os.path.join(out, name, "metrics.jsonl"))
                  if line.strip()]
        logged = [m for m in logged if "loss" in m]
        first = next((m["step"] for m in logged if m["loss"] < 0.25), "")
        for m in logged:
            if m["step"] % 250 == 0:
                rows.append({"variant": r["variant"], "seed": r["seed"], "fitted": r["fitted"],
                             "below_025": first, "step": m["step"],
                             "loss": f"{m['loss']:.4f}"})
    tmp = os.path.join(HERE, "losses.csv.tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, os.path.join(HERE, "losses.csv"))


if __name__ == "__main__":
    main(sys.argv[1])
