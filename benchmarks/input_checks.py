"""Cost of ``Transformer.forward``'s input check (token ids inside the vocabulary, finite
positions; one device sync), as the ratio of a forward + backward with the check on to one with
it off (``model.check_inputs``), measured in the same run.

Repeats are interleaved (one call of each setting per round, which one first alternating) and
the ratio is taken within each round, then the median over rounds is reported, so a slow phase of a shared machine hits both
alike. The training loop turns the check off (its batches are the task's and its positions the
sampler's); evaluation and generation keep it.

    python benchmarks/input_checks.py --threads 1
    python benchmarks/input_checks.py --threads 1 --json input_checks.json
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch

try:                                     # run as a script from the repository root
    from _common import machine_line
except ImportError:                      # pragma: no cover
    from benchmarks._common import machine_line
from lengen.model import ModelConfig, Transformer

SIZES = [  # (d_model, n_layers, batch, length)
    (16, 1, 4, 20),           # the tests' tiny model: the check is the largest share here
    (64, 2, 32, 64),
    (256, 4, 16, 128),
]


def timed(model, x, pos) -> float:
    t = time.perf_counter()
    model(x, pos).sum().backward()
    return time.perf_counter() - t


def measure(d, layers, batch, length, rounds, device):
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=8, d_model=d, n_layers=layers,
                                    n_heads=4 if d >= 64 else 2)).to(device)
    x = torch.randint(0, 8, (batch, length), device=device)
    pos = torch.arange(length, device=device).float()
    for flag in (True, False, True, False):                       # warm-up
        model.check_inputs = flag
        timed(model, x, pos)
    ratios, on_times = [], []
    for i in range(rounds):
        # alternate which setting runs first: the first call of a round is measurably slower
        times = {}
        for flag in ((True, False) if i % 2 else (False, True)):
            model.check_inputs = flag
            times[flag] = timed(model, x, pos)
        ratios.append(times[True] / times[False])
        on_times.append(times[True])
    return {"d_model": d, "n_layers": layers, "batch": batch, "length": length,
            "step_ms_checked": 1e3 * statistics.median(on_times),
            "ratio_checked_vs_unchecked": statistics.median(ratios)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    rows = [measure(*s, args.rounds, args.device) for s in SIZES]
    print(machine_line())
    print(f"{'d_model':>7} {'layers':>6} {'B':>3} {'T':>4} {'ms (checked)':>13} {'ratio':>6}")
    for r in rows:
        print(f"{r['d_model']:>7} {r['n_layers']:>6} {r['batch']:>3} {r['length']:>4} "
              f"{r['step_ms_checked']:>13.2f} {r['ratio_checked_vs_unchecked']:>6.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": platform.processor() or platform.machine(),
                       "torch": torch.__version__, "threads": torch.get_num_threads(),
                       "device": args.device, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
