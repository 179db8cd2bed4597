"""Why do the same seeds of the single-head TRA give different outcomes in
``results/tra-flipflop-cpu/heatmaps`` (made at commit ba49f8a) and in this folder (beea821)?
(issue 28 item 2). Trains the Appendix A model (2 layers, 1 head, the cpu scale's other sizes,
1,500-step schedule) for the first STOP steps with each commit's own ``lengen`` and writes, per
commit, the initial weights' checksum, the logged loss and gradient norm every 10 steps, and the
share of surviving query rows / positive scores (``run.py``'s ``survival``) at steps 0, 100,
200, ... of the checkpoints, all read with the model of the checkout that runs this script.

    python experiments/tra-single-head/divergence.py OUT [SEED [STOP [OLD NEW]]]
        # defaults: seed 0, 100 steps, ba49f8a beea821 (needs git; ~3 min per commit, 1 thread)

Writes OUT/divergence.csv (commit, step, loss, grad_norm), OUT/survival.csv (commit, step,
layer, alive_rows, positive_scores) and OUT/init.txt (commit, parameter count, sha1 of the
initial weights).
"""
from __future__ import annotations

import csv
import hashlib
import json
import os
import subprocess
import sys

HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "results", "tra-single-head")   # the results folder this script reads and writes


def worker(seed: int, stop: int, run_dir: str) -> None:
    """Runs under one commit's ``lengen`` (PYTHONPATH): train to ``stop`` and print the init sha."""
    import torch

    import lengen
    from lengen.recipes.tra_flipflop import model_config   # a module before the recipes became packages
    cfg = model_config("TRA", "cpu", seed, n_layers=2, n_heads=1, name=f"appA-s{seed}")
    cfg["model"]["d_ff"] = 512                # what both commits trained (see the README)
    cfg["train"].update(steps=1500, ckpt_every=100, threads=1, log_every=10)
    resolved = lengen.resolve(cfg)
    torch.manual_seed(resolved.config.train.seed)
    model = lengen.Transformer(resolved.config.model)
    blob = b"".join(p.detach().numpy().tobytes() for p in model.parameters())
    print("INIT", sum(p.numel() for p in model.parameters()), hashlib.sha1(blob).hexdigest())
    lengen.train(resolved, run_dir, stop_at=stop, quiet=True)


def survival_rows(run_dir: str, seed: int):
    """(step, layer, alive, positive) of a run's checkpoints, read with this checkout's model."""
    import torch

    import lengen
    from lengen.recipes.tra_flipflop import model_config
    from lengen.rundir.checkpoint import load_weights
    from lengen.tasks.flipflop import generate_flipflop, to_batch
    sys.path.insert(0, HERE)
    from run import survival

    probe = to_batch(generate_flipflop(64, 64, 0.8, torch.Generator().manual_seed(999))).inputs
    cfg = model_config("TRA", "cpu", seed, n_layers=2, n_heads=1, name="x")
    cfg["model"]["d_ff"] = 512
    resolved = lengen.resolve(cfg)
    torch.manual_seed(resolved.config.train.seed)
    model = lengen.Transformer(resolved.config.model).eval()
    step = 0
    while True:
        if step:
            path = os.path.join(run_dir, "checkpoints", f"step_{step:07d}", "model.safetensors")
            if not os.path.exists(path):
                return
            load_weights(model, path)
        for layer, (alive, positive) in enumerate(survival(model, probe)):
            yield step, layer, alive, positive
        step += 100


def main(out: str, seed: int = 0, stop: int = 100, old: str = "ba49f8a", new: str = "beea821"):
    os.makedirs(out, exist_ok=True)
    root = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=HERE, check=True,
                          capture_output=True, text=True).stdout.strip()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with (open(os.path.join(out, "divergence.csv"), "w", newline="") as div_f,
          open(os.path.join(out, "survival.csv"), "w", newline="") as sur_f,
          open(os.path.join(out, "init.txt"), "w") as init):
        div, sur = csv.writer(div_f), csv.writer(sur_f)
        div.writerow(["commit", "step", "loss", "grad_norm"])
        sur.writerow(["commit", "step", "layer", "alive_rows", "positive_scores"])
        for commit in (old, new):
            _one_commit(root, out, commit, seed, stop, env, div, sur, init)


def _one_commit(root, out, commit, seed, stop, env, div, sur, init):
    """Train ``seed`` for ``stop`` steps with ``commit``'s own lengen; append its rows."""
    src = os.path.join(out, f"src-{commit}")
    os.makedirs(src, exist_ok=True)
    archive = subprocess.run(["git", "archive", commit, "lengen"], cwd=root, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", src], input=archive, check=True)
    run_dir = os.path.join(out, f"run-{commit}")
    res = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", str(seed),
                          str(stop), run_dir], env={**env, "PYTHONPATH": src},
                         check=True, capture_output=True, text=True)
    line = next(x for x in res.stdout.splitlines() if x.startswith("INIT"))
    init.write(f"{commit} {line[5:]}\n")
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for r in map(json.loads, f):
            if "loss" in r:
                div.writerow([commit, r["step"], f"{r['loss']:.7f}", f"{r['grad_norm']:.7f}"])
    for step, layer, alive, positive in survival_rows(run_dir, seed):
        sur.writerow([commit, step, layer, f"{alive:.4f}", f"{positive:.4f}"])
    print(f"{commit}: {line}", flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "--worker":
        worker(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    else:
        args = sys.argv[2:]
        main(sys.argv[1], *(int(a) for a in args[:2]), *args[2:4])
