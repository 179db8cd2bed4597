"""Attention forward + backward on CPU: the per-row C kernel (``lengen/ops/fused_rows.c``) against
the paths it replaces, as ratios measured in the same round.

For each shape (the recipes' cpu-scale attention: flip-flop 32 x 4 heads x 127 x head dim 16,
addition 32 x 4 x 68 x 16 with FIRE's dense [H, T, T] bias, copy 64 x 4 x 42 x 32; plus head
dim 64 and T = 512 for the limits) and each op:

* ``softmax``: no bias. Before: ``F.scaled_dot_product_attention`` (what training used).
* ``bias``: a dense [H, T, T] bias with a gradient. Before: the tiled op.
* ``fot``: forgetting attention (a per-key column). Before: the tiled op.
* ``tra``: Threshold Relative Attention. Before: the tiled op.
* ``cope``: CoPE (64 position embeddings, the module's default). Before: the tiled op (with its
  C row kernels).
* ``xl``: softmax with Transformer-XL's Toeplitz relative term and its per-key column (the tiled
  form ``lengen.posenc.xl`` hands the ops for evenly stepped positions). Before: the tiled op.
* ``cope_xl``: both. Before: the tiled op.

"tiled" is the same op with an explicit tile size (``budget``, which selects the tiled path);
"fused" the default call. A step is ``(op(q, k, v) * g).sum().backward()``. Rounds interleave
every case; the ratio is the median over rounds of before / fused from the same round.

    python benchmarks/fused_rows.py --threads 1
    python benchmarks/fused_rows.py --threads 1 --repeats 20 --json fused.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from lengen.ops import fused_rows
from lengen.ops.cope.fast_cpu import cope_attention_fast_cpu
from lengen.ops.fot.fast_cpu import fot_attention_fast_cpu
from lengen.ops.softmax.fast_cpu import softmax_attention_fast_cpu
from lengen.ops.tile_bias import BiasHook, RelativeBias
from lengen.ops.tra.fast_cpu import tra_attention_fast_cpu

try:                                     # run as a script from the repository root
    from _common import lengen_revision, machine_info, machine_line
except ImportError:                      # pragma: no cover
    from benchmarks._common import lengen_revision, machine_info, machine_line

#: name -> (B, H, T, head dim)
SHAPES = {
    "flipflop": (32, 4, 127, 16),
    "addition": (32, 4, 68, 16),
    "copy": (64, 4, 42, 32),
    "hd64": (8, 4, 128, 64),
    "T512": (4, 4, 512, 16),
}
TILED = dict(budget=1 << 18)             # the tiled ops' default budget, given explicitly


def ops(x):
    """op name -> (before, fused): callables of no arguments returning the output."""
    q, k, v, bias, lf, lg = x["q"], x["k"], x["v"], x["bias"], x["log_f"], x["log_gate"]
    pe = x["pos_emb"]
    bfn = lambda s, e: bias[:, s:e]                          # noqa: E731

    def rel():                                # XL's tiled form, made anew per call as XL does
        return RelativeBias(x["qv"], x["P"], x["content"])
    xl = BiasHook(lambda s, e: rel().dense()[..., s:e, :], rel)
    return {
        "softmax": (lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
                    lambda: softmax_attention_fast_cpu(q, k, v)),
        "bias": (lambda: softmax_attention_fast_cpu(q, k, v, bias_fn=bfn, **TILED),
                 lambda: softmax_attention_fast_cpu(q, k, v, bias_fn=bfn)),
        "fot": (lambda: fot_attention_fast_cpu(q, k, v, lf, **TILED),
                lambda: fot_attention_fast_cpu(q, k, v, lf)),
        "tra": (lambda: tra_attention_fast_cpu(q, k, v, lg, **TILED),
                lambda: tra_attention_fast_cpu(q, k, v, lg)),
        "cope": (lambda: cope_attention_fast_cpu(q, k, v, pe, **TILED),
                 lambda: cope_attention_fast_cpu(q, k, v, pe)),
        "xl": (lambda: softmax_attention_fast_cpu(q, k, v, bias_fn=xl, **TILED),
               lambda: softmax_attention_fast_cpu(q, k, v, bias_fn=xl)),
        "cope_xl": (lambda: cope_attention_fast_cpu(q, k, v, pe, bias_fn=xl, **TILED),
                    lambda: cope_attention_fast_cpu(q, k, v, pe, bias_fn=xl)),
    }


def inputs(B, H, T, D):
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g)              # noqa: E731
    x = dict(q=r(B, H, T, D), k=r(B, H, T, D), v=r(B, H, T, D), bias=0.5 * r(H, T, T),
             log_f=F.logsigmoid(r(B, H, T) + 2), log_gate=F.logsigmoid(r(B, H, T)),
             pos_emb=0.3 * r(D, 64), qv=0.3 * r(B, H, T, D), P=0.3 * r(H, 2 * T - 1, D),
             content=0.3 * r(B, H, T))
    x = {n: t.requires_grad_(True) for n, t in x.items()}
    return x, r(B, H, T, D)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES),
                    help="shapes (default all)")
    ap.add_argument("--repeats", type=int, default=10, help="timed rounds (default 10)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed calls per case (default 2)")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if fused_rows.kernels() is None:
        raise SystemExit("the C kernel is not available here (no compiler, or switched off)")
    cases = {}
    for sh in args.shapes:
        x, g = inputs(*SHAPES[sh])
        for op, (before, fused) in ops(x).items():
            for side, fn in (("before", before), ("fused", fused)):
                cases[sh, op, side] = (fn, g)
    for fn, g in cases.values():
        for _ in range(args.warmup):
            (fn() * g).sum().backward()
    times = {c: [] for c in cases}
    for _ in range(args.repeats):
        for c, (fn, g) in cases.items():
            t0 = time.perf_counter()
            (fn() * g).sum().backward()
            times[c].append(time.perf_counter() - t0)
    rows = []
    for sh in args.shapes:
        for op in ops(inputs(1, 1, 2, 1)[0]):
            b, f = times[sh, op, "before"], times[sh, op, "fused"]
            rows.append(dict(shape=sh, BHTD=SHAPES[sh], op=op,
                             before="sdpa" if op == "softmax" else "tiled",
                             before_ms=1e3 * statistics.median(b),
                             fused_ms=1e3 * statistics.median(f),
                             speedup=statistics.median([x / y for x, y in zip(b, f)])))
    setup = dict(repeats=args.repeats, threads=torch.get_num_threads(), lengen=lengen_revision())
    print("attention forward + backward; speed-up = median over rounds of before / fused")
    print(", ".join(f"{k}={v}" for k, v in setup.items()))
    print(machine_line(), flush=True)
    print("| shape (B, H, T, hd) | op | before | before ms | fused ms | speed-up |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['shape']} {r['BHTD']} | {r['op']} | {r['before']} | {r['before_ms']:.2f} | "
              f"{r['fused_ms']:.2f} | {r['speedup']:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(setup=setup, machine=machine_info(), rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
