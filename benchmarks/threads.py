"""Training steps/s of the demo's models at 1 and 2 torch threads, with ``OMP_WAIT_POLICY`` unset
and PASSIVE, on an idle machine and beside a busy process (issue 31), as ratios to the best
configuration of the same model in the same run; CPU ms/step (all of the process's threads) says
how much of the machine each configuration took for its speed.

Each configuration runs in a fresh subprocess, because the OpenMP runtime torch ships (libgomp)
reads ``OMP_WAIT_POLICY`` once, when ``import torch`` loads it:

* ``unset``: the variable is removed from the worker's environment and the worker imports torch
  before lengen, so lengen's default (:func:`lengen.threads.set_wait_policy`) comes too late and
  the runtime keeps its own default (spin a while, then sleep);
* ``PASSIVE``: the variable is also removed, and the worker imports lengen first: lengen sets it
  in ``os.environ`` before torch loads. So this column also checks that lengen's in-process
  setting reaches the runtime.

The busy neighbour is a process this script starts and stops itself: one torch thread spinning a
512 x 512 matmul loop. ``OMP_NUM_THREADS`` is removed from the workers' environment (each sets
its thread count itself), so "lengen's default" is what a user without that variable gets.

A step is the training loop's own (:func:`lengen.recipes.estimate.time_training_steps`: batch,
positions, forward, loss, backward, clipping, AdamW), of the demo's configuration: flip-flop with
64 pairs (T = 127 inputs), batch 32, d_model 64, 2 layers, 4 heads (``--d-model`` changes the
width, e.g. to look at a model above lengen's one-thread threshold).

    python benchmarks/threads.py                         # fot tra nope, ~3 s per configuration
    python benchmarks/threads.py --models fot --seconds 5 --rounds 3 --json threads.json
    python benchmarks/threads.py --policies passive --neighbours busy --rounds 4   # 1 vs 2 threads
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUSY = ("import torch\ntorch.set_num_threads(1)\na = torch.randn(512, 512)\n"
        "while True:\n    a @ a\n")


def worker(args) -> None:
    """One configuration, in this fresh process; prints one JSON line."""
    if args.policy == "unset":
        import torch  # noqa: F401 - before lengen on purpose: lengen's wait policy comes too late
    import lengen.threads as lt           # lengen/__init__ sets OMP_WAIT_POLICY first
    import torch

    at_load = os.environ.get("OMP_WAIT_POLICY", "unset") if args.policy == "passive" else "unset"

    from lengen.config import resolve
    from lengen.recipes.demo import DEMO, DEMO_MODELS
    from lengen.recipes.estimate import time_training_steps
    from lengen.rundir.load import prepare

    torch_default = torch.get_num_threads()
    choice = lt.choose_threads(0, args.d_model, "cpu")
    attention, posenc = DEMO_MODELS[args.model]
    cfg = resolve({"model": {"attention": attention, "posenc": posenc, "d_model": args.d_model,
                             "n_layers": DEMO["n_layers"], "n_heads": DEMO["n_heads"]},
                   "task": {"name": "flipflop", "kwargs": {"n_pairs": DEMO["n_pairs"]}},
                   "train": {"batch_size": DEMO["batch_size"], "lr": DEMO["lr"],
                             "threads": args.threads}})
    task, model = prepare(cfg)
    cfg = cfg.config
    first = time_training_steps(cfg, task, model, steps=2, warmup=2)     # also the warm-up
    steps = max(3, min(1000, int(args.seconds / max(first, 1e-6))))
    t0, c0 = time.perf_counter(), time.process_time()
    per_step = time_training_steps(cfg, task, model, steps=steps, warmup=0)
    cpu = time.process_time() - c0              # every thread of this process
    print(json.dumps({"steps": steps, "seconds": time.perf_counter() - t0,
                      "ms": 1e3 * per_step, "cpu_ms": 1e3 * cpu / steps, "threads_used": torch.get_num_threads(),
                      "wait_policy_at_torch_load": at_load,
                      "torch_default_threads": torch_default, "lengen_choice": choice}))


def run_config(model, threads, policy, args) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--model", model,
           "--threads", str(threads), "--policy", policy, "--seconds", str(args.seconds),
           "--d-model", str(args.d_model)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"worker failed ({' '.join(cmd)}):\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


class Neighbour:
    """A busy process (one torch thread in a matmul loop) for the duration of a ``with``."""

    def __enter__(self):
        env = dict(os.environ, OMP_NUM_THREADS="1")
        self.proc = subprocess.Popen([sys.executable, "-c", BUSY], env=env)
        time.sleep(1.0)                   # past torch's import: spinning
        return self

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["fot", "tra", "nope"],
                    help="demo models (lengen.recipes.demo.DEMO_MODELS; nope = softmax NoPE)")
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--seconds", type=float, default=3.0, help="timed seconds per configuration")
    ap.add_argument("--rounds", type=int, default=1, help="repeat the grid; the median is shown")
    ap.add_argument("--policies", nargs="+", choices=("unset", "passive"),
                    default=["unset", "passive"], help="OMP_WAIT_POLICY cases to run")
    ap.add_argument("--neighbours", nargs="+", choices=("idle", "busy"), default=["idle", "busy"],
                    help="without / beside the busy process")
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--policy", choices=("unset", "passive"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        args.threads = args.threads[0]
        return worker(args)

    sys.path.insert(0, HERE)
    from _common import lengen_revision, machine_info, machine_line

    info = machine_info()
    print(f"lengen {lengen_revision()}; {machine_line(info)} (this process; each configuration "
          f"sets its own); load average at start {os.getloadavg()[0]:.2f}")
    policies = args.policies
    results = {}          # (model, neighbour, threads, policy) -> [ms per round]
    cpu_ms = {}           # the same -> [CPU ms per step per round]
    extra = {}
    for _ in range(args.rounds):
        for neighbour in args.neighbours:
            with (Neighbour() if neighbour == "busy" else _Nothing()):
                for model in args.models:
                    for threads in args.threads:
                        for policy in policies:
                            r = run_config(model, threads, policy, args)
                            key = (model, neighbour, threads, policy)
                            results.setdefault(key, []).append(r["ms"])
                            cpu_ms.setdefault(key, []).append(r["cpu_ms"])
                            extra[model] = r
                            print(f"  {model:5s} {neighbour:4s} threads {threads} {policy:7s}: "
                                  f"{r['ms']:8.1f} ms/step, CPU {r['cpu_ms']:8.1f} ms/step ({r['steps']} steps)",
                                  flush=True)
    print(f"load average at end {os.getloadavg()[0]:.2f}")

    rows = []
    for model in args.models:
        old = (extra[model]["torch_default_threads"], "unset")
        new = (extra[model]["lengen_choice"], "passive")
        ms = {k[1:]: statistics.median(v) for k, v in results.items() if k[0] == model}
        cpu = {k[1:]: statistics.median(v) for k, v in cpu_ms.items() if k[0] == model}
        best = min(ms.values())
        best_by = {n: min(v for k, v in ms.items() if k[0] == n) for n in args.neighbours}
        print(f"\n{model} (d_model {args.d_model}): ms/step, steps/s and step time / best "
              f"configuration's, median of {args.rounds} round(s)")
        print("| neighbour | threads | OMP_WAIT_POLICY | ms/step | steps/s | x best | "
              "x best, same neighbour | CPU ms/step | default |")
        print("|---|--:|---|--:|--:|--:|--:|--:|---|")
        for (neighbour, threads, policy), v in ms.items():
            tag = ("lengen now" if (threads, policy) == new else
                   "before (torch's threads, unset)" if (threads, policy) == old else "")
            print(f"| {neighbour} | {threads} | {policy.upper() if policy != 'unset' else 'unset'}"
                  f" | {v:.1f} | {1e3 / v:.2f} | {v / best:.2f} | {v / best_by[neighbour]:.2f} "
                  f"| {cpu[(neighbour, threads, policy)]:.1f} | {tag} |")
            rows.append(dict(model=model, neighbour=neighbour, threads=threads, policy=policy,
                             ms=v, cpu_ms=cpu[(neighbour, threads, policy)], ratio=v / best, ratio_neighbour=v / best_by[neighbour],
                             default=tag))
        if ("busy",) + new in ms:
            now_busy = ms[("busy",) + new] / best_by["busy"]
            passive_busy = max(v / best_by["busy"] for k, v in ms.items()
                               if k[0] == "busy" and k[2] == "passive")
            print(f"lengen's default ({new[0]} thread(s), PASSIVE) beside a busy process: "
                  f"{now_busy:.2f}x the best busy configuration; the slowest PASSIVE "
                  f"configuration there: {passive_busy:.2f}x (issue 31's bound: 1.3)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(machine=info, lengen=lengen_revision(), d_model=args.d_model,
                           seconds=args.seconds, rounds=args.rounds, rows=rows), f, indent=1)


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


if __name__ == "__main__":
    main()
