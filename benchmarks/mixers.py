"""Training step time of the token mixers (LSTM, Mamba-2, Gated DeltaNet), fast path
(``attn_impl=auto``: ``nn.LSTM``, the chunked SSD / UT-transform forms) and reference path
(``naive``: the token-by-token recurrences), as ratios to plain softmax attention (SDPA) with
NoPE measured in the same run; and the evaluation forward (no grad) of the same models.

A step is benchmarks/step_time.py's: forward + cross-entropy + backward + AdamW on random
tokens, rounds interleaved (one step of every model per round), each ratio taken against the
baseline of its own round, the median over rounds reported. Fixed model (flags change it):
d_model 64, 2 layers, 4 heads, vocab 8, batch 8, T = 512, fp32, NoPE (a mixer reads no scheme).

    python benchmarks/mixers.py --quick            # T = 64, 2 rounds, fast paths only (~20 s)
    python benchmarks/mixers.py --threads 1 --json mixers.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from lengen.attention import ATTENTIONS

try:                                     # run as a script from the repository root
    from _common import lengen_revision, machine_info, machine_line
    from step_time import build, step
except ImportError:                      # pragma: no cover
    from benchmarks._common import lengen_revision, machine_info, machine_line
    from benchmarks.step_time import build, step

MIXERS = [n for n, c in ATTENTIONS.items() if c.is_token_mixer]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="T = 64, 2 rounds, no naive paths")
    ap.add_argument("--T", type=int, default=None, help="sequence length (default 512)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=None, help="timed rounds (default 5)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    ap.add_argument("--naive", action="store_true", help="also time the reference recurrences")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    args.T = args.T or (64 if args.quick else 512)
    repeats = args.repeats or (2 if args.quick else 5)
    arms = [("sdpa", "lean")] + [(m, "auto") for m in MIXERS]
    if args.naive and not args.quick:
        arms += [(m, "naive") for m in MIXERS]

    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 8, (args.batch, args.T), generator=g)
    targets = torch.randint(0, 8, (args.batch, args.T), generator=g)
    models = {}
    for kind, impl in arms:
        args.impl = impl
        models[(kind, impl)] = build(kind, "nope", args)   # ("sdpa", "nope"): the baseline
        for _ in range(args.warmup):
            step(*models[(kind, impl)], tokens, targets)
    train_t = {a: [] for a in arms}
    eval_t = {a: [] for a in arms}
    for _ in range(repeats):
        for a, (model, opt) in models.items():
            t0 = time.perf_counter()
            step(model, opt, tokens, targets)
            train_t[a].append(time.perf_counter() - t0)
            model.eval()
            with torch.no_grad():
                t0 = time.perf_counter()
                model(tokens)
                eval_t[a].append(time.perf_counter() - t0)
            model.train()
    rows = []
    base = arms[0]
    for a in arms:
        rows.append(dict(kind=a[0], impl=a[1],
                         train_ms=1e3 * statistics.median(train_t[a]),
                         train_ratio=statistics.median(t / b for t, b in zip(train_t[a],
                                                                             train_t[base])),
                         eval_ms=1e3 * statistics.median(eval_t[a]),
                         eval_ratio=statistics.median(t / b for t, b in zip(eval_t[a],
                                                                            eval_t[base]))))
    setup = dict(T=args.T, batch=args.batch, d_model=args.d_model, layers=args.layers,
                 heads=args.heads, repeats=repeats, threads=torch.get_num_threads(),
                 lengen=lengen_revision())
    print("token mixers: training step (fwd+bwd+AdamW) and eval forward; ratio = median over "
          "rounds of (time / softmax+nope through SDPA, same round)")
    print(", ".join(f"{k}={v}" for k, v in setup.items()))
    print(machine_line(), flush=True)
    print(f"{'kind':<15} {'impl':<6} {'train ms':>9} {'ratio':>6} {'eval ms':>8} {'ratio':>6}")
    for r in rows:
        print(f"{r['kind']:<15} {r['impl']:<6} {r['train_ms']:9.1f} {r['train_ratio']:6.2f} "
              f"{r['eval_ms']:8.1f} {r['eval_ratio']:6.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(setup=setup, machine=machine_info(), rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
