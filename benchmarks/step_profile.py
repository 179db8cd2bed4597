"""Where one training step of a recipe's cpu-scale model goes, op by op (torch.profiler): the
ops with the most self time per step, their calls per step and their share, so that the largest
share is the one gone after (issue 31: "profile first").

    python benchmarks/step_profile.py --model flipflop:NoPE --threads 1 --json prof.json

The step is the training loop's own (``forward_loss``, backward, the optimizer that
``build_optimizer`` makes, zero_grad) on one fixed batch, after three warm-up steps; the table
is the mean over ``--steps`` profiled steps. The models are those of ``vs_commit.py``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import lengen_revision, machine_info, machine_line  # noqa: E402
from roofline import MODELS, build  # noqa: E402

from lengen.train.optim import build_optimizer  # noqa: E402
from lengen.train.step import forward_loss  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="flipflop:NoPE", choices=MODELS, help="recipe:model key")
    ap.add_argument("--steps", type=int, default=5, help="profiled steps (default 5)")
    ap.add_argument("--top", type=int, default=20, help="ops listed (default 20)")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    ap.add_argument("--json", help="also write the table here")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg, task, net = build(args.model)
    net.train()
    opt = build_optimizer(net, cfg.train)
    batch = task.train_batch(cfg.train.batch_size, torch.Generator().manual_seed(0))
    B, T = batch.inputs.shape
    pos = net.sample_positions(T, batch_size=B, device="cpu",
                               generator=torch.Generator().manual_seed(0), batch=batch)

    def step():
        loss = forward_loss(net, batch, pos, cfg.train, torch.device("cpu"),
                            getattr(task, "output_slice", None))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    with torch.profiler.profile() as prof:
        for _ in range(args.steps):
            step()
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events)
    rows = sorted(({"op": e.key, "ms_per_step": e.self_cpu_time_total / 1e3 / args.steps,
                    "calls_per_step": e.count / args.steps,
                    "share": e.self_cpu_time_total / total} for e in events),
                  key=lambda r: -r["ms_per_step"])[:args.top]
    setup = dict(model=args.model, steps=args.steps, threads=torch.get_num_threads(),
                 lengen=lengen_revision(), batch=f"{B} x {T}",
                 total_ms_per_step=round(total / 1e3 / args.steps, 1))
    print(f"Self CPU time per training step of {args.model} (torch.profiler, mean of "
          f"{args.steps} steps)")
    print(", ".join(f"{k}={v}" for k, v in setup.items()))
    print(machine_line(), flush=True)
    print("| op | ms / step | calls / step | share |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| `{r['op']}` | {r['ms_per_step']:.2f} | {r['calls_per_step']:g} | "
              f"{100 * r['share']:.1f} % |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(setup=setup, machine=machine_info(), rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
