"""Training steps of the recipes' cpu-scale models with lengen's allocator thresholds on and off
(``lengen.threads.tune_allocator``; ``LENGEN_MALLOC_TUNING=0`` turns them off), each measurement a
fresh process, the two settings alternating within a round.

A step is the training loop's own (``lengen.recipes.estimate.time_training_steps``: batch,
positions, forward, loss, backward, clipping, AdamW, schedule), one torch thread by default.
Each cell: median over rounds of ms per step, and the minor page faults per step the process
took while timing (``getrusage``); the ratio is the median over rounds of off / on from the
same round (a slow phase of a shared machine hits both).

    python benchmarks/allocator.py
    python benchmarks/allocator.py --models flipflop:NoPE addition:fire --rounds 6 --json a.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import lengen_revision, machine_info, machine_line  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_MODELS = ("flipflop:TRA", "flipflop:FoT", "flipflop:NoPE", "addition:fire", "copy:rope")

CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, {bench!r})
import lengen  # noqa: F401  (the wait policy, before torch)
import torch
from roofline import build
from lengen.recipes.estimate import time_training_steps
from lengen.threads import set_process_threads, tune_allocator

set_process_threads({threads})                 # what a sweep's --threads does
cfg, task, net = build({model!r})
time_training_steps(cfg, task, net, steps={warmup}, device="cpu")      # warm-up (and tuning)
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
t = time_training_steps(cfg, task, net, steps={steps}, device="cpu")
f1 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
print(json.dumps(dict(ms=1000 * t, faults=(f1 - f0) / {steps}, tuned=tune_allocator())))
"""


def measure(model: str, tuned: bool, steps: int, warmup: int, threads: int) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT, LENGEN_MALLOC_TUNING="1" if tuned else "0")
    code = CHILD.format(bench=os.path.dirname(os.path.abspath(__file__)), model=model,
                        steps=steps, warmup=warmup, threads=threads)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         cwd=ROOT)
    if out.returncode:
        raise SystemExit(f"{model} (tuning {'on' if tuned else 'off'}) failed:\n{out.stderr}")
    rec = json.loads(out.stdout.strip().splitlines()[-1])
    if rec["tuned"] != tuned and tuned:
        raise SystemExit("the allocator could not be tuned here (not glibc, or a user setting): "
                         "nothing to compare")
    return rec


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=list(DEFAULT_MODELS),
                    help="recipe:model keys of benchmarks/roofline.py (default: the five of "
                         "issue 31 item 4)")
    ap.add_argument("--rounds", type=int, default=4, help="rounds (default 4)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per measurement")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--json", help="also write every measurement here")
    args = ap.parse_args(argv)
    print(f"lengen {lengen_revision()}, threads {args.threads}, {args.steps} steps after "
          f"{args.warmup}, {args.rounds} rounds")
    print(machine_line(), flush=True)
    runs = {m: {"on": [], "off": []} for m in args.models}
    for r in range(args.rounds):
        for m in args.models:
            order = ("off", "on") if r % 2 == 0 else ("on", "off")
            for side in order:
                rec = measure(m, side == "on", args.steps, args.warmup, args.threads)
                runs[m][side].append(rec)
                print(f"  round {r + 1} {m} tuning {side}: {rec['ms']:.1f} ms, "
                      f"{rec['faults']:.0f} faults / step", flush=True)
    rows = []
    print("| model | off: ms / step | on: ms / step | steps/s on / off | faults / step off | "
          "faults / step on |")
    print("|---|---|---|---|---|---|")
    for m, d in runs.items():
        med = lambda side, k: statistics.median(x[k] for x in d[side])  # noqa: E731
        ratio = statistics.median(a["ms"] / b["ms"] for a, b in zip(d["off"], d["on"]))
        row = dict(model=m, off_ms=med("off", "ms"), on_ms=med("on", "ms"), speedup=ratio,
                   off_faults=med("off", "faults"), on_faults=med("on", "faults"))
        rows.append(row)
        print(f"| {m} | {row['off_ms']:.1f} | {row['on_ms']:.1f} | {ratio:.2f} | "
              f"{row['off_faults']:.0f} | {row['on_faults']:.0f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(setup=vars(args), lengen=lengen_revision(), machine=machine_info(),
                           rows=rows, runs=runs), f, indent=1)


if __name__ == "__main__":
    main()
