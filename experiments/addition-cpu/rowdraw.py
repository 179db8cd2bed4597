"""Does drawing randomized positions per row remove randomized FIRE's dip at short lengths?
(issue 27 item 3)

One cpu-scale FIRE run (the recipe's ``fire`` setting: randomized positions, reversed format,
index hints, 5,000 steps at batch 32) with ``model.positions_kwargs.train_draw='row'``: every
training row gets its own sorted subset of [0, L) of its own length, as evaluation draws it,
instead of the first positions of one draw for the batch's padded length (``'batch'``, the
recipe's runs in ``results.csv``). Same seeds, data order and evaluation as the recipe's run of
that seed. Appends one JSON line (EM at every length 1..20) to ``OUT/rowdraw.jsonl``.

    OMP_NUM_THREADS=1 PYTHONPATH=. python experiments/addition-cpu/rowdraw.py OUT SEED [DATA_SEED]
"""
import json
import os
import sys
import time

from lengen.recipes.addition import run_config
from lengen.sweep import RunSpec, run_one


def main(out, seed, data_seed=0):
    seed, data_seed = int(seed), int(data_seed)
    name = f"fire-row-s{seed}-d{data_seed}"
    cfg = run_config("fire", "cpu-5k", seed=seed, data_seed=data_seed, name=name)  # was 'cpu' 
    cfg["model"]["positions_kwargs"]["train_draw"] = "row"
    t0 = time.time()
    res = run_one(RunSpec(name, cfg, {"setting": "fire", "train_draw": "row"}), out, quiet=True,
                  threads=1)
    rec = {"name": name, "seed": seed, "data_seed": data_seed, "train_draw": "row",
           "status": res["status"], "error": res.get("error"),
           "minutes": round((time.time() - t0) / 60, 1),
           "em": {r["split"]: round(100 * r["value"], 1) for r in res["rows"]
                  if r.get("metric") == "seq_acc"}}
    print(json.dumps(rec))
    with open(os.path.join(out, "rowdraw.jsonl"), "a") as f:
        f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
