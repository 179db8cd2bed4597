"""SwiGLU's activation forward + backward on CPU: lengen's C kernel (``lengen/ops/glu``) against
PyTorch's ``F.silu(g) * u`` (silu and mul forward; two muls and silu_backward backward), as
ratios measured in the same round, at the shape of the flip-flop cpu-scale models' MLP (32 x 127
tokens x d_ff 128) and a wider one (32 x 127 x 512).

    python benchmarks/swiglu.py --threads 1
"""
from __future__ import annotations

import argparse
import json
import statistics

import torch
import torch.nn.functional as F

from lengen.ops.glu import gated
from lengen.ops.glu.gated import swiglu

try:                                     # run as a script from the repository root
    from _common import interleaved, lengen_revision, machine_info, machine_line, median_ratio
except ImportError:                      # pragma: no cover
    from benchmarks._common import (interleaved, lengen_revision, machine_info, machine_line,
                                    median_ratio)

SHAPES = {"flipflop": (32, 127, 128), "wide": (32, 127, 512)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=30, help="timed rounds (default 30)")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if gated.kernels() is None:
        raise SystemExit("the C kernel is not available here (no compiler, or switched off)")
    gen = torch.Generator().manual_seed(0)
    cases = {}
    for name, shape in SHAPES.items():
        g = torch.randn(*shape, generator=gen).requires_grad_(True)
        u = torch.randn(*shape, generator=gen).requires_grad_(True)
        dh = torch.randn(*shape, generator=gen)
        cases[name, "torch"] = lambda g=g, u=u, dh=dh: (F.silu(g) * u).backward(dh)
        cases[name, "lengen"] = lambda g=g, u=u, dh=dh: swiglu(g, u).backward(dh)
    times = interleaved(cases, args.repeats)
    rows = [dict(shape=n, torch_ms=1e3 * statistics.median(times[n, "torch"]),
                 lengen_ms=1e3 * statistics.median(times[n, "lengen"]),
                 speedup=median_ratio(times[n, "torch"], times[n, "lengen"]))
            for n in SHAPES]
    setup = dict(repeats=args.repeats, threads=torch.get_num_threads(), lengen=lengen_revision())
    print("SwiGLU forward + backward (gradients into leaves); speed-up = median over rounds of "
          "torch / lengen")
    print(", ".join(f"{k}={v}" for k, v in setup.items()))
    print(machine_line(), flush=True)
    print("| shape | F.silu(g) * u ms | lengen ms | speed-up |")
    print("|---|---|---|---|")
    for r in rows:
        print(f"| {r['shape']} {SHAPES[r['shape']]} | {r['torch_ms']:.3f} | {r['lengen_ms']:.3f} | "
              f"{r['speedup']:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(setup=setup, machine=machine_info(), rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
