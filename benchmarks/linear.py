"""A linear layer's forward + backward on CPU (x, weight and bias gradients): lengen's oneDNN
training path (``lengen/ops/linear``) against PyTorch's ``F.linear`` (MKL's sgemm), as ratios
measured in the same round, at the projections of the recipes' cpu-scale models (32 x 127
tokens: flip-flop's d_model 64 -> 3 x 64 (q, k, v), 64 -> 64, 64 -> 128 and 128 -> 64 for
SwiGLU's d_ff 128) and a wider one (d_model 256 -> 1024, with a bias). A second case per shape
freezes the weight (and leaves the bias out), so it times the forward and the input gradient
only, which is where the two paths differ: the weight gradient is PyTorch's ``mm`` in both.
Every case runs ``ADMIT_AFTER`` times before the rounds, so oneDNN's per-shape compile is done
before timing (``lengen.ops.linear.onednn``'s admission rule).

    python benchmarks/linear.py --threads 1
"""
from __future__ import annotations

import argparse
import json
import statistics

import torch
import torch.nn.functional as F

from lengen.ops.linear import onednn
from lengen.ops.linear.onednn import linear

try:                                     # run as a script from the repository root
    from _common import interleaved, lengen_revision, machine_info, machine_line, median_ratio
except ImportError:                      # pragma: no cover
    from benchmarks._common import (interleaved, lengen_revision, machine_info, machine_line,
                                    median_ratio)

ROWS = 32 * 127
#: name -> (in features, out features, bias)
SHAPES = {"qkv 64->192": (64, 192, False), "proj 64->64": (64, 64, False),
          "up 64->128": (64, 128, False), "down 128->64": (128, 64, False),
          "wide 256->1024": (256, 1024, True)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=30, help="timed rounds (default 30)")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if not onednn.available():
        raise SystemExit("this PyTorch has no working oneDNN linear (the op or its probe failed)")
    gen = torch.Generator().manual_seed(0)
    cases = {}
    for name, (k, n, bias) in SHAPES.items():
        x = torch.randn(ROWS, k, generator=gen).requires_grad_(True)
        w = (torch.randn(n, k, generator=gen) / k ** 0.5).requires_grad_(True)
        b = torch.zeros(n).requires_grad_(True) if bias else None
        dy = torch.randn(ROWS, n, generator=gen)
        for side, fn in (("torch", F.linear), ("lengen", linear)):
            cases[name, side] = lambda fn=fn, x=x, w=w, b=b, dy=dy: fn(x, w, b).backward(dy)
            # forward and x's gradient only (the weight frozen): the part that differs
            wf = w.detach()
            cases[name, side + "-x"] = (lambda fn=fn, x=x, wf=wf, dy=dy:
                                        fn(x, wf, None).backward(dy))
    for fn in cases.values():                # past the admission rule and the compile
        for _ in range(onednn.ADMIT_AFTER):
            fn()
    times = interleaved(cases, args.repeats)
    rows = []
    for n in SHAPES:
        rows.append(dict(shape=n, torch_ms=1e3 * statistics.median(times[n, "torch"]),
                         lengen_ms=1e3 * statistics.median(times[n, "lengen"]),
                         speedup=median_ratio(times[n, "torch"], times[n, "lengen"]),
                         speedup_x_only=median_ratio(times[n, "torch-x"], times[n, "lengen-x"])))
    setup = dict(rows=ROWS, repeats=args.repeats, threads=torch.get_num_threads(),
                 lengen=lengen_revision())
    print("Linear forward + backward; speed-up = median over rounds of torch / lengen (all "
          "gradients; and with the weight frozen: forward and x's gradient only)")
    print(", ".join(f"{k}={v}" for k, v in setup.items()))
    print(machine_line(), flush=True)
    print("| shape | F.linear ms | lengen ms | speed-up | speed-up, x's gradient only |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['shape']} | {r['torch_ms']:.3f} | {r['lengen_ms']:.3f} | "
              f"{r['speedup']:.2f} | {r['speedup_x_only']:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(setup=setup, machine=machine_info(), rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
