"""One optimizer step on CPU: torch's fused AdamW (what ``lengen.train.optim.build_optimizer``
picks for float32 CPU parameters) against the default per-parameter loop, as ratios measured in
the same round, on the parameters of the recipes' cpu-scale models (flip-flop TRA, addition
FIRE, copy RoPE) with random gradients.

    python benchmarks/optimizer_step.py --threads 1
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import (interleaved, lengen_revision, machine_info, machine_line,  # noqa: E402
                     median_ratio)
from roofline import build  # noqa: E402

from lengen.train.optim import param_groups  # noqa: E402

MODELS = ("flipflop:TRA", "addition:fire", "copy:rope")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=30, help="timed rounds (default 30)")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    cases = {}
    for key in MODELS:
        cfg, _, net = build(key)
        tc = cfg.train
        for p in net.parameters():
            p.grad = torch.randn_like(p) * 1e-2
        for fused in (False, True):
            opt = torch.optim.AdamW(param_groups(net, tc.weight_decay, tc.decay_all), lr=tc.lr,
                                    betas=tuple(tc.betas), eps=tc.eps, fused=fused)
            cases[key, fused] = opt.step
    times = interleaved(cases, args.repeats)
    rows = [dict(model=m, loop_ms=1e3 * statistics.median(times[m, False]),
                 fused_ms=1e3 * statistics.median(times[m, True]),
                 speedup=median_ratio(times[m, False], times[m, True]))
            for m in MODELS]
    setup = dict(repeats=args.repeats, threads=torch.get_num_threads(), lengen=lengen_revision())
    print("AdamW step; speed-up = median over rounds of loop / fused")
    print(", ".join(f"{k}={v}" for k, v in setup.items()))
    print(machine_line(), flush=True)
    print("| model | per-parameter loop ms | fused ms | speed-up |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['loop_ms']:.3f} | {r['fused_ms']:.3f} | {r['speedup']:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(setup=setup, machine=machine_info(), rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
