"""Probe: which cpu-scale setting lets the addition models fit 1..10 digits (issue 11)?

One run of an addition setting with the model width / depth, batch, lr and steps given on the
command line, the rest from the recipe's cpu config (``lengen.recipes.addition.specs.run_config``:
the paper's block, reversed format, index hints, warm-up 100 then cosine to 0.1 x lr), and a
learning curve: greedy exact match at lengths 3, 6, 10 (in distribution) and 13, 16 (beyond it)
every 500 steps, 64 sequences each (``train.eval_splits``). Writes ``OUT/<run>/`` and appends one
JSON line (final EM at 1..20, minutes) to ``OUT/probes.jsonl``.

    python experiments/addition-cpu/probe.py OUT SETTING LR STEPS D_MODEL N_LAYERS BATCH [SEED [DEVICE]]
    python experiments/addition-cpu/probe.py runs/add-probes fire 3e-3 6000 64 2 32
    python experiments/addition-cpu/probe.py runs/add-search kerple_log 3e-3 8000 64 2 128 1 cuda

SEED (default 0) sets the initialisation and the data order; DEVICE defaults to cpu. A run
named with a seed gets an ``-s<SEED>`` suffix (seed 0 keeps the original name).
"""
import json
import os
import sys
import time

from lengen.recipes.addition import run_config
from lengen.sweep import RunSpec, run_one


def main(out, setting, lr, steps, d, n_layers, batch, seed=0, device="cpu"):
    lr, steps, d, n_layers, batch = float(lr), int(steps), int(d), int(n_layers), int(batch)
    seed = int(seed)
    name = f"{setting}-lr{lr:g}-st{steps}-d{d}-L{n_layers}-b{batch}" + (f"-s{seed}" if seed else "")
    cfg = run_config(setting, "cpu", seed=seed, data_seed=seed, name=name, device=device)
    cfg["model"].update(d_model=d, n_layers=n_layers, d_ff=4 * d, n_heads=4)
    cfg["train"].update(lr=lr, steps=steps, batch_size=batch, eval_every=500, ckpt_every=0,
                        eval_splits=["len=3", "len=6", "len=10", "len=13", "len=16"],
                        eval_sequences=64)
    cfg["eval"]["splits"] = [f"len={k}" for k in range(1, 21)]
    t0 = time.time()
    res = run_one(RunSpec(name, cfg, {"setting": setting}), out, quiet=True, threads=1)
    rec = {"name": name, "setting": setting, "lr": lr, "steps": steps, "batch": batch,
           "seed": seed, "device": device, "status": res["status"], "error": res.get("error"),
           "minutes": round((time.time() - t0) / 60, 1),
           "em": {r["split"]: round(100 * r["value"], 1) for r in res["rows"]
                  if r.get("metric") == "seq_acc"}}
    print(json.dumps(rec))
    with open(os.path.join(out, "probes.jsonl"), "a") as f:
        f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
