"""Zhou et al. 2024, training length (issue 27 item 3): FIRE with index hints trained on 1..N
digits at the Fig. 3 search's cpu budget, evaluated to 2N.

The model and budget of ``../addition-cpu/probe.py`` (2 blocks, d_model 64, 4 heads, d_ff 256;
8,000 steps at batch 128, lr 3e-3, warm-up 100 then cosine to 0.1x) with the recipe's FIRE
setting (reversed format, index hints with a random start, randomized positions over [0, 256));
only the training lengths (1..N) and the test lengths (1..2N, 100 sequences each) differ.
Learning curve every 1,000 steps at lengths N/2, N, 5N/4 and 3N/2 (64 sequences). Writes
``OUT/<run>/`` and appends one JSON line (EM at every length, minutes) to ``OUT/runs.jsonl``.

    python experiments/addition-n20-cpu/run.py OUT SEED [N]        # N defaults to 20
"""
import json
import os
import sys
import time

from lengen.recipes.addition import run_config
from lengen.sweep import RunSpec, run_one


def main(out, seed, N=20):
    seed, N = int(seed), int(N)
    name = f"fire-N{N}-lr0.003-st8000-d64-L2-b128-s{seed}"
    cfg = run_config("fire", "cpu", seed=seed, data_seed=seed, N=N, name=name)
    cfg["model"].update(d_model=64, n_layers=2, d_ff=256, n_heads=4)
    cfg["task"]["kwargs"]["max_eval_length"] = 2 * N
    cfg["train"].update(lr=3e-3, steps=8000, batch_size=128, eval_every=1000, ckpt_every=0,
                        eval_splits=[f"len={k}" for k in (N // 2, N, 5 * N // 4, 3 * N // 2)],
                        eval_sequences=64)
    cfg["eval"]["splits"] = [f"len={k}" for k in range(1, 2 * N + 1)]
    t0 = time.time()
    res = run_one(RunSpec(name, cfg, {"setting": "fire", "N": N}), out, quiet=True, threads=1)
    rec = {"name": name, "setting": "fire", "N": N, "lr": 3e-3, "steps": 8000, "batch": 128,
           "seed": seed, "status": res["status"], "error": res.get("error"),
           "minutes": round((time.time() - t0) / 60, 1),
           "em": {r["split"]: round(100 * r["value"], 1) for r in res["rows"]
                  if r.get("metric") == "seq_acc"}}
    print(json.dumps(rec))
    with open(os.path.join(out, "runs.jsonl"), "a") as f:
        f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
