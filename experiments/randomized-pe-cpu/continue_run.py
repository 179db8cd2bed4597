"""Continue a finished run past its step count: the probes in ``probes.jsonl`` whose note says
``continue_run.py`` (stop 23, stop 24) were made with this.

The run directory ``SRC`` is copied to ``DST`` (its results and final weights dropped, its
checkpoints kept), ``train.steps`` is raised to ``STEPS`` and training resumes from the last
checkpoint. The cpu-scale randomized-pe runs train at a constant lr, and a resumed run matches
one trained straight through (the recipe's runs at the new step counts ended at exactly the
continuations' accuracies), so this is the same run trained longer, at the cost of the added
steps only. Prints one JSON line: token accuracy at the training lengths 1, 14, 27, 40.

    python experiments/randomized-pe-cpu/continue_run.py SRC DST STEPS
"""
import json
import os
import shutil
import sys
import time

import lengen

TRAIN_LENGTHS = ["len=1", "len=14", "len=27", "len=40"]


def continue_run(src: str, dst: str, steps: int) -> dict:
    with open(os.path.join(src, "config.json")) as f:
        cfg = json.load(f)
    # only a constant lr makes the continuation the same run trained longer: any other schedule
    # depends on train.steps, so raising it would change the lr of the steps already taken
    if cfg["train"].get("schedule", "cosine") != "constant":   # cosine: TrainConfig's default
        sys.exit(f"{src} does not train at a constant lr (train.schedule)")
    if steps <= cfg["train"]["steps"]:
        sys.exit(f"{src} trains {cfg['train']['steps']} steps; ask for more than that")
    if not os.path.exists(dst):          # else: resume an interrupted continuation
        shutil.copytree(src, dst)
        for f in ("eval.json", "eval.csv", "results.csv", "model.safetensors"):
            if os.path.exists(os.path.join(dst, f)):
                os.remove(os.path.join(dst, f))
    cfg["train"]["steps"] = steps
    cfg["train"]["threads"] = 1          # two continuations at once on the 2 cores
    cfg["name"] = os.path.basename(os.path.normpath(dst))
    cfg["eval"]["splits"] = TRAIN_LENGTHS
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    t0 = time.time()
    _, _, rows = lengen.train(lengen.resolve(cfg), dst, quiet=True)
    acc = {r["split"]: round(100 * r["value"], 1) for r in rows if r["metric"] == "token_acc"}
    rec = dict(run=cfg["name"], steps=steps, token_acc=acc,
               mean=round(sum(acc.values()) / len(acc), 1),
               minutes=round((time.time() - t0) / 60, 1))
    print(json.dumps(rec), flush=True)
    return rec


if __name__ == "__main__":
    continue_run(sys.argv[1], sys.argv[2], int(sys.argv[3]))
