"""Probe: at which cpu budget does the index-warping recipe's RoPE baseline fit summation's
training lengths (issue 27 item 5)?

One run of a column (default ``rope``) on ``summation`` with the steps, lr, width and depth given
on the command line, the rest from the recipe's cpu config
(``lengen.recipes.index_warping.recipe.run_config``: ReLU MLP 4 x d_model, RMSNorm pre-norm,
AdamW with weight decay 0.05, batch 64, 150 warm-up steps then cosine decay, K ~ U(2, 8), test
K = 2..40 strided). Writes ``OUT/<run>/`` and appends one JSON line (sequence accuracy per test
length, seen / unseen means, minutes) to ``OUT/probes.jsonl``.

    python experiments/index-warping-summation/probe.py OUT STEPS LR D_MODEL N_LAYERS [SEED [COLUMN]]
    python experiments/index-warping-summation/probe.py runs/sum-probe 12000 1e-3 128 3
"""
import json
import os
import statistics
import sys
import time

from lengen.recipes.index_warping import run_config
from lengen.sweep import RunSpec, run_one

M = 8                                     # summation's longest training K (the paper's)


def main(out, steps, lr, d, n_layers, seed=0, column="rope"):
    steps, lr, d, n_layers, seed = int(steps), float(lr), int(d), int(n_layers), int(seed)
    name = f"summation-{column}-st{steps}-lr{lr:g}-d{d}-L{n_layers}-s{seed}"
    cfg = run_config("summation", column, "cpu", seed, name=name)
    cfg["model"].update(d_model=d, n_layers=n_layers, d_ff=4 * d)
    cfg["train"].update(steps=steps, lr=lr, ckpt_every=0)
    t0 = time.time()
    res = run_one(RunSpec(name, cfg, {"column": column}), out, quiet=True, threads=1)
    acc = {int(r["split"].split("=")[1]): round(100 * r["value"], 1) for r in res["rows"]
           if r.get("metric") == "seq_acc" and r["split"].startswith("len=")}
    seen = [v for k, v in acc.items() if k <= M]
    unseen = [v for k, v in acc.items() if k > M]
    rec = {"name": name, "column": column, "steps": steps, "lr": lr, "d_model": d,
           "n_layers": n_layers, "seed": seed, "status": res["status"],
           "minutes": round((time.time() - t0) / 60, 1),
           "seen_mean": round(statistics.fmean(seen), 1) if seen else None,
           "unseen_mean": round(statistics.fmean(unseen), 1) if unseen else None,
           "acc": dict(sorted(acc.items()))}
    print(json.dumps(rec))
    with open(os.path.join(out, "probes.jsonl"), "a") as f:
        f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
