"""RMSNorm forward + backward on CPU: lengen's C row kernel (``lengen/ops/norm``) against
``torch.nn.functional.rms_norm`` (fused forward, backward as separate passes), as ratios
measured in the same round, at the shapes the recipes' cpu-scale models normalise: the
residual stream of flip-flop (32 x 127 x 64), addition (32 x 68 x 64) and copy (64 x 42 x 128),
and TRA's per-head q / k normalisation (32 x 4 x 127 x 16, no weight).

    python benchmarks/rms_norm.py --threads 1
"""
from __future__ import annotations

import argparse
import json
import os
import statistics

import torch
import torch.nn.functional as F

from lengen.ops.norm import rms
from lengen.ops.norm.rms import rms_norm

try:                                     # run as a script from the repository root
    from _common import interleaved, lengen_revision, machine_info, machine_line, median_ratio
except ImportError:                      # pragma: no cover
    from benchmarks._common import (interleaved, lengen_revision, machine_info, machine_line,
                                    median_ratio)

#: name -> (shape, weighted)
SHAPES = {"flipflop": ((32, 127, 64), True), "addition": ((32, 68, 64), True),
          "copy": ((64, 42, 128), True), "tra_qk": ((32, 4, 127, 16), False)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=30, help="timed rounds (default 30)")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if rms.kernels() is None:
        raise SystemExit("the C kernel is not available here (no compiler, or switched off)")
    g = torch.Generator().manual_seed(0)
    cases = {}
    for name, (shape, weighted) in SHAPES.items():
        x = torch.randn(*shape, generator=g).requires_grad_(True)
        w = torch.randn(shape[-1], generator=g).requires_grad_(True) if weighted else None
        dy = torch.randn(*shape, generator=g)
        d = shape[-1]
        cases[name, "torch"] = lambda x=x, w=w, dy=dy, d=d: F.rms_norm(x, (d,), w, 1e-6).backward(dy)
        cases[name, "lengen"] = lambda x=x, w=w, dy=dy: rms_norm(x, w, 1e-6).backward(dy)
    times = interleaved(cases, args.repeats)
    rows = [dict(shape=n, torch_ms=1e3 * statistics.median(times[n, "torch"]),
                 lengen_ms=1e3 * statistics.median(times[n, "lengen"]),
                 speedup=median_ratio(times[n, "torch"], times[n, "lengen"]))
            for n in SHAPES]
    setup = dict(repeats=args.repeats, threads=torch.get_num_threads(), lengen=lengen_revision())
    print("RMSNorm forward + backward; speed-up = median over rounds of torch / lengen")
    print(", ".join(f"{k}={v}" for k, v in setup.items()))
    print(machine_line(), flush=True)
    print("| shape | F.rms_norm ms | lengen ms | speed-up |")
    print("|---|---|---|---|")
    for r in rows:
        shape, weighted = SHAPES[r["shape"]]
        print(f"| {r['shape']} {shape}{'' if weighted else ', no weight'} | {r['torch_ms']:.3f} | "
              f"{r['lengen_ms']:.3f} | {r['speedup']:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(setup=setup, machine=machine_info(), rows=rows), f, indent=1)


if __name__ == "__main__":
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    main()
