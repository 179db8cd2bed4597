"""Training throughput of the recipes' cpu-scale models at an old commit against this checkout,
as old / new ratios of step time taken in one interleaved run (issue 31 item 4).

Each model is built by its recipe's own config function at each commit (``tra_flipflop``'s
``model_config``, ``addition``'s, ``index_warping``'s and ``randomized_pe``'s ``run_config``;
the last two models are Ruoss et al.'s Transformer-XL columns on reverse string), seed 0, and
timed through that commit's ``lengen.recipes.estimate.time_training_steps`` (the training loop's
own step: batch, positions, forward, loss, backward, clipping, AdamW, schedule). Every
measurement is a fresh process with the other commit's tree out of ``sys.path``; a round times
every model once per commit, the two commits in alternating order, and the table gives the
median over rounds of old step / new step from the same round (slow phases of a shared machine
hit both sides). Both sides run with the same torch thread count (``--threads``, default 1, the
recipes' per-worker count) and ``OMP_WAIT_POLICY=PASSIVE``, so the ratio is the code's, not the
thread policy's (``benchmarks/threads.py`` measures that). The allocator thresholds that
``lengen.train`` sets for CPU work at commits that have them (``lengen.threads.tune_allocator``)
are set on that side too, as training would (``benchmarks/allocator.py`` measures them alone).

Same numbers: before timing, each process computes the loss and the gradient norm of the
model's first training batch (``float.hex``) on a copy of the model whose weights are drawn from
each parameter's name (a change of initialisation between the commits would otherwise show as a
change of the maths), and a digest of that batch and of the parameter names and shapes; the
table says whether the two commits agree (``exact``), differ within fp32 rounding (relative
difference <= 1e-5: ``fp32``), or not (``differs``; ``different batch or parameters`` when the digests differ). Tokens per step are the batch's input tokens (batch x
T), the same on both sides when the batch digests agree, so the tokens/s ratio is the step-time
ratio.

    python benchmarks/vs_commit.py                        # 26d36a4 vs this checkout
    python benchmarks/vs_commit.py --old 26d36a4 --rounds 5 --steps 20 --json vs.json
    python benchmarks/vs_commit.py --models flipflop:TRA addition:fire --rounds 1 --steps 3
    python benchmarks/vs_commit.py --pool a.json b.json --json pooled.json   # no new run

``--pool`` reads earlier ``--json`` outputs against the same old commit (runs of the same new
training code, which the caller vouches for: the table names each file's new commit) and gives
the table over all their rounds together, with each model's quartiles of the per-round ratio
and how many rounds reach 1.5: one run's median over six rounds moved by 0.14 between two runs
of the same code on a shared host.

The old tree is unpacked with ``git archive`` into a temporary folder (removed afterwards).
Run it on an otherwise idle machine.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import lengen_revision, machine_line  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
#: recipe:model -> how the child builds its config (the recipes' cpu scale, seed 0)
MODELS = {
    "flipflop:TRA": ("flipflop", "TRA"),
    "flipflop:FoT": ("flipflop", "FoT"),
    "flipflop:NoPE": ("flipflop", "NoPE"),
    "addition:fire": ("addition", "fire"),
    "copy:rope": ("copy", "rope"),
    # Ruoss et al.'s Transformer-XL columns on reverse string (randomized-pe's cpu scale)
    "reverse:relative": ("randomized", "relative"),
    "reverse:rand_relative": ("randomized", "rand_relative"),
}

CHILD = r'''
import hashlib, json, sys, time
spec = json.loads(sys.argv[1])
import torch
torch.set_num_threads(spec["threads"])
import lengen
from lengen.recipes import estimate
try:
    from lengen.rundir.load import prepare
except ImportError:
    from lengen.train.loop import prepare
kind, name = spec["recipe"], spec["model"]
if kind == "flipflop":
    from lengen.recipes.tra_flipflop import recipe as r
    cfg = r.model_config(name, "cpu", 0)
elif kind == "addition":
    from lengen.recipes.addition.specs import SCALES, run_config
    # the 5,000 x 32 cpu scale ('cpu' until it moved to the fitted budget, 'cpu-5k' since)
    cfg = run_config(name, "cpu-5k" if "cpu-5k" in SCALES else "cpu", 0)
elif kind == "randomized":
    from lengen.recipes.randomized_pe.recipe import run_config
    cfg = run_config("reverse_string", name, "cpu", 0)
else:
    from lengen.recipes.index_warping.recipe import run_config
    cfg = run_config(kind, name, "cpu", 0)
resolved = lengen.resolve(cfg)
task, net = prepare(resolved)
cfg = getattr(resolved, "config", resolved)   # a Resolved since the build pipeline, else the config
if hasattr(estimate, "use_threads"):
    estimate.use_threads = lambda *a, **k: None          # keep the thread count set above
try:   # what use_threads also does for CPU work at commits that have it (lengen.train's policy)
    from lengen.threads import tune_allocator
    tune_allocator()
except ImportError:
    pass
torch.set_num_threads(spec["threads"])
# the numbers: loss and gradient norm of the first training batch at initialisation
tc = cfg.train
batch = task.train_batch(tc.batch_size, torch.Generator().manual_seed(0))
digest = hashlib.blake2b(batch.inputs.numpy().tobytes() + batch.targets.numpy().tobytes(),
                         digest_size=8).hexdigest()
B, T = batch.inputs.shape
# on a copy whose weights are drawn per parameter name (so that a change of initialisation
# between the commits does not hide or fake a change of the maths)
import copy
ref = copy.deepcopy(net).train()
names = sorted(n for n, _ in ref.named_parameters())
with torch.no_grad():
    for n, p in ref.named_parameters():
        seed = int(hashlib.blake2b(n.encode(), digest_size=4).hexdigest(), 16)
        p.copy_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(seed),
                                  dtype=torch.float64))
pos = ref.sample_positions(T, batch_size=B, device="cpu",
                           generator=torch.Generator().manual_seed(0), batch=batch)
from lengen.train.step import forward_loss
torch.manual_seed(0)     # dropout masks: building may draw a different number of numbers first
loss = forward_loss(ref, batch, pos, tc, torch.device("cpu"), getattr(task, "output_slice", None))
loss.backward()
gn = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in ref.parameters() if p.grad is not None))
digest += hashlib.blake2b(repr([(n, tuple(p.shape)) for n, p in sorted(ref.named_parameters())])
                          .encode(), digest_size=4).hexdigest()
del ref
sec = estimate.time_training_steps(cfg, task, net, steps=spec["steps"], warmup=spec["warmup"])
print("RESULT " + json.dumps(dict(sec=sec, tokens=B * T, loss=float(loss).hex(),
                                  gnorm=float(gn).hex(), digest=digest)))
'''


def measure(tree: Path, recipe: str, model: str, args) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree), OMP_WAIT_POLICY="PASSIVE",
               OMP_NUM_THREADS=str(args.threads), LENGEN_CACHE_DIR=args.cache)
    spec = dict(recipe=recipe, model=model, threads=args.threads, steps=args.steps,
                warmup=args.warmup)
    p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec)], cwd=tree, env=env,
                       capture_output=True, text=True)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{recipe}:{model} at {tree} failed:\n{p.stderr[-3000:]}")


def agreement(a: dict, b: dict) -> str:
    if a["digest"] != b["digest"]:
        return "different batch or parameters"
    la, lb = float.fromhex(a["loss"]), float.fromhex(b["loss"])
    ga, gb = float.fromhex(a["gnorm"]), float.fromhex(b["gnorm"])
    if (la, ga) == (lb, gb):
        return "exact"
    rel = max(abs(la - lb) / max(abs(lb), 1e-30), abs(ga - gb) / max(abs(gb), 1e-30))
    return f"fp32 ({rel:.1e})" if rel <= 1e-5 else f"differs ({rel:.1e})"


def quartiles(x: list[float]) -> tuple[float, float]:
    """The lower and upper quartile of x (statistics.quantiles' default method; x itself when
    shorter than 2)."""
    if len(x) < 2:
        return x[0], x[0]
    q = statistics.quantiles(x, n=4)
    return q[0], q[2]


def print_table(rows: dict, pooled: bool = False) -> None:
    """The markdown table over every round of each model (with quartiles and the rounds at 1.5
    or more when ``pooled``)."""
    extra = " ratio quartiles | rounds >= 1.5 |" if pooled else ""
    print("| model | tokens / step | old ms / step | new ms / step | tokens/s new / old | "
          "same numbers |" + extra)
    print("|---|---|---|---|---|---|" + ("---|---|" if pooled else ""))
    for key, rr in rows.items():
        ratios = [r["old"]["sec"] / r["new"]["sec"] for r in rr]
        o = statistics.median(r["old"]["sec"] for r in rr) * 1e3
        n = statistics.median(r["new"]["sec"] for r in rr) * 1e3
        # every round's check, each distinct answer once (one run's rounds all give the same
        # answer; a pooled table's rounds come from several runs)
        same = "; ".join(dict.fromkeys(agreement(r["old"], r["new"]) for r in rr))
        line = (f"| {key} | {rr[0]['new']['tokens']} | {o:.1f} | {n:.1f} | "
                f"{statistics.median(ratios):.2f} | {same} |")
        if pooled:
            lo, hi = quartiles(ratios)
            line += f" {lo:.2f} - {hi:.2f} | {sum(r >= 1.5 for r in ratios)} of {len(ratios)} |"
        print(line)


def pool(paths: list[str], out: str | None) -> int:
    """The table over the rounds of earlier runs' --json files (same old commit)."""
    runs = []
    for path in paths:
        with open(path) as f:
            runs.append(json.load(f))
    olds = {r["old"] for r in runs}
    if len(olds) != 1:
        raise SystemExit(f"--pool: the files measure different old commits ({', '.join(olds)}); "
                         f"pool runs against one old commit (as each run's --old spelled it)")
    threads = set()
    for r in runs:                       # a pooled file keeps a list of one thread count
        t = r.get("threads")
        threads.update(t if isinstance(t, list) else [t])
    if len(threads) != 1 or None in threads:
        raise SystemExit(f"--pool: the files ran with different or unknown thread counts "
                         f"({', '.join(map(str, threads))}); pool runs at one thread count")
    rows: dict[str, list] = {}
    for r in runs:
        for key, rr in r["rows"].items():
            rows.setdefault(key, []).extend(rr)
    print(f"pooled: old {runs[0]['old']}; new " + ", ".join(
        f"{r['new']} ({os.path.basename(p)})" for r, p in zip(runs, paths)))
    print_table(rows, pooled=True)
    if out:
        with open(out, "w") as f:
            json.dump(dict(old=runs[0]["old"], new=[r["new"] for r in runs],
                           pooled=[os.path.basename(p) for p in paths],
                           threads=sorted(threads), rows=rows), f,
                      indent=1)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", default="26d36a4", help="the old commit (default 26d36a4, issue 31)")
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS),
                    metavar="M", help=f"recipe:model keys (default all: {', '.join(MODELS)})")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--steps", type=int, default=10, help="timed steps per measurement")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads on both sides")
    ap.add_argument("--json", default=None, help="write every measurement here")
    ap.add_argument("--pool", nargs="+", default=None, metavar="JSON",
                    help="no new run: pool the rounds of these earlier --json outputs (same old "
                         "commit and thread count) into one table; --old, --models, --rounds, "
                         "--steps, --warmup and --threads are then not used")
    args = ap.parse_args(argv)
    if args.pool:
        return pool(args.pool, args.json)
    print(machine_line())
    print(f"old {args.old} vs new {lengen_revision()} (this checkout), threads {args.threads}, "
          f"{args.steps} steps after {args.warmup}, {args.rounds} rounds")
    tmp = Path(tempfile.mkdtemp(prefix="lengen-vs-"))
    args.cache = str(tmp / "cache")               # C kernels built fresh for each tree's source
    try:
        old = tmp / "old"
        old.mkdir()
        arch = subprocess.run(["git", "-C", str(ROOT), "archive", args.old], check=True,
                              capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(old)], input=arch, check=True)
        rows = {m: [] for m in args.models}
        for rnd in range(args.rounds):
            for key in args.models:
                recipe, model = MODELS[key]
                sides = [("old", old), ("new", ROOT)]
                if rnd % 2:
                    sides.reverse()
                got = {side: measure(tree, recipe, model, args) for side, tree in sides}
                rows[key].append(got)
                print(f"  round {rnd + 1} {key}: old {got['old']['sec'] * 1e3:.1f} ms, "
                      f"new {got['new']['sec'] * 1e3:.1f} ms", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print_table(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(old=args.old, new=lengen_revision(), threads=args.threads,
                           rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
