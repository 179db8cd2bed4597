"""Probe: can the randomized-pe cpu scale fit the string tasks (issue 14 item 6)?

One run per argument ``task:scheme:lr:steps[:batch[:threads]]`` (e.g.
``reverse_string:relative:1e-3:6000`` or ``duplicate_string:relative:2e-3:4000:32``), the recipe's
own cpu-scale config (``lengen.recipes.randomized_pe.recipe.run_config``: Ruoss et al.'s
encoder, batch 64, constant lr, train lengths U(1..40)) with ``steps``, ``lr`` and optionally the
batch size (default 64) and torch threads (default 1) replaced, and a
learning curve: token accuracy at the training lengths 10, 20, 30, 40 every 500 steps
(``train.eval_splits``, 128 sequences each). Writes ``OUT/<run>/`` and appends one JSON line per
run (final accuracies, the first step reaching 90% mean at training lengths, minutes) to
``OUT/probes.jsonl``.

    python experiments/randomized-pe-cpu/probe_strings.py OUT reverse_string:relative:1e-3:6000 ...
"""
import json
import os
import sys
import time

import lengen
from lengen.recipes.randomized_pe import run_config

TRAIN_LENGTHS = ["len=10", "len=20", "len=30", "len=40"]


def run(out: str, task: str, scheme: str, lr: float, steps: int, batch: int = 64,
        threads: int = 1) -> dict:
    cfg = run_config(task, scheme, "cpu", 0, lr)
    cfg["name"] = f"{task}-{scheme}-lr{lr:g}-{steps}" + ("" if batch == 64 else f"-b{batch}")
    cfg["train"].update(steps=steps, eval_every=500, eval_splits=TRAIN_LENGTHS, eval_sequences=128,
                        threads=threads, progress=False, ckpt_every=1000, batch_size=batch)
    cfg["eval"]["splits"] = TRAIN_LENGTHS
    run_dir = os.path.join(out, cfg["name"])
    t0 = time.time()
    _, _, rows = lengen.train(lengen.resolve(cfg), run_dir, quiet=True)
    curve = {}
    path = os.path.join(run_dir, "metrics.jsonl")
    with open(path) if os.path.exists(path) else open(os.devnull) as f:
        for line in f:
            r = json.loads(line)
            accs = [r.get(f"eval/{s}/token_acc") for s in TRAIN_LENGTHS]
            if all(a is not None for a in accs):
                curve[r["step"]] = round(100 * sum(accs) / len(accs), 1)
    final = {r["split"]: round(100 * r["value"], 1) for r in rows if r["metric"] == "token_acc"}
    curve[steps] = round(sum(final.values()) / len(final), 1)
    fit = next((s for s, a in sorted(curve.items()) if a >= 90), None)
    rec = dict(task=task, scheme=scheme, lr=lr, steps=steps, batch=batch, threads=threads,
               final=final, curve=curve,
               first_step_at_90=fit, minutes=round((time.time() - t0) / 60, 1))
    print(json.dumps(rec), flush=True)
    with open(os.path.join(out, "probes.jsonl"), "a") as f:
        f.write(json.dumps(rec) + "\n")
    return rec


if __name__ == "__main__":
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for arg in sys.argv[2:]:
        task, scheme, lr, steps, *rest = arg.split(":")
        run(out, task, scheme, float(lr), int(steps), *map(int, rest))
