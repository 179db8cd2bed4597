"""Probe for issue 28 item 4: do the cpu scale's short or unfitted runs fit with more steps, a
decaying lr or another lr (Even Pairs, missing duplicate, duplicate string)?

One run per argument ``task:scheme:seed:steps[:schedule[:lr]]``
(e.g. ``even_pairs:rand_relative:1:6000``): the
recipe's own cpu-scale config (``lengen.recipes.randomized_pe.recipe.run_config``: Ruoss et
al.'s encoder, the scale's batch and lr for the task, train lengths U(1..40), the same
evaluation: test lengths 41, 81, ..., 500 and the training-length curve) with ``steps`` in
place of the scale's, plus token accuracy every 1,500 steps at lengths 20, 40 (training) and
41, 201, 500 (beyond; 32 sequences each). Writes ``OUT/<run>/`` and appends one JSON line per
run to ``OUT/budget.jsonl``: the mean token accuracy over the test lengths (the recipe's
score), over lengths 1, 14, 27, 40 (the recipe's fit rule: >= 90 %), the periodic curve and
the minutes. A fifth field ``cosine`` replaces the scale's constant lr by a cosine decay from the
same lr to a tenth of it over the run (no warmup; ``constant`` keeps the recipe's), and a sixth
sets the lr (default: the scale's for the task).

    python experiments/randomized-pe-cpu-encodings/budget_probe.py OUT even_pairs:relative:0:6000 ...
"""
import json
import os
import sys
import time

from lengen.recipes.randomized_pe import run_config
from lengen.sweep import RunSpec, run_one

TRACK = ["len=20", "len=40", "len=41", "len=201", "len=500"]
FIT_LENGTHS = [1, 14, 27, 40]


def run(out: str, task: str, scheme: str, seed: int, steps: int, schedule: str = "constant",
        lr: float | None = None) -> dict:
    cfg = run_config(task, scheme, "cpu", seed, lr=lr)
    cfg["name"] = (f"{task}-{scheme}-s{seed}-st{steps}" + ("" if schedule == "constant" else "-cos")
                   + ("" if lr is None else f"-lr{lr:g}"))
    cfg["train"].update(steps=steps, eval_every=1500, eval_splits=TRACK, eval_sequences=32)
    if schedule == "cosine":
        cfg["train"].update(schedule="cosine", warmup_steps=0, min_lr_frac=0.1)
    elif schedule != "constant":
        raise SystemExit(f"unknown schedule {schedule!r}: constant or cosine")
    t0 = time.time()
    res = run_one(RunSpec(cfg["name"], cfg, {"task": task, "scheme": scheme}), out, quiet=True,
                  threads=1)
    acc = {int(r["split"].split("=")[1]): 100 * r["value"] for r in res["rows"]
           if r.get("metric") == "token_acc" and str(r.get("split", "")).startswith("len=")}
    test = [v for n, v in acc.items() if n > 40]
    curve = {}
    path = os.path.join(out, cfg["name"], "metrics.jsonl")
    with open(path) if os.path.exists(path) else open(os.devnull) as f:
        for line in f:
            r = json.loads(line)
            got = {s: r.get(f"eval/{s}/token_acc") for s in TRACK}
            if all(v is not None for v in got.values()):
                curve[r["step"]] = {s: round(100 * v, 1) for s, v in got.items()}
    rec = {"task": task, "scheme": scheme, "seed": seed, "steps": steps, "lr": cfg["train"]["lr"],
           "schedule": schedule, "batch": cfg["train"]["batch_size"], "status": res["status"],
           "test_score": round(sum(test) / len(test), 1) if test else None,
           "train_score": round(sum(acc[n] for n in FIT_LENGTHS) / 4, 1)
           if all(n in acc for n in FIT_LENGTHS) else None,
           "curve": curve, "minutes": round((time.time() - t0) / 60, 1)}
    print(json.dumps(rec), flush=True)
    with open(os.path.join(out, "budget.jsonl"), "a") as f:
        f.write(json.dumps(rec) + "\n")
    return rec


if __name__ == "__main__":
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for arg in sys.argv[2:]:
        task, scheme, seed, steps, *rest = arg.split(":")
        schedule = rest[0] if rest else "constant"
        lr = float(rest[1]) if len(rest) > 1 else None
        run(out, task, scheme, int(seed), int(steps), schedule, lr)
