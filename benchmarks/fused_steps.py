"""Training step of step_time.py's model with the fused-rows C kernel on and off, interleaved in
one process, for the attention kinds and schemes that take it (issue 31 item 3).

``LENGEN_FUSED_ROWS`` is read at every attention call, so one model per combination steps with it
set to 1 (the per-row kernel, ``lengen/ops/fused_rows.c``) and to 0 (the tiled ops it replaces)
in alternation; the ratio is the median over rounds of tiled step / fused step from the same
round. Beside them, the SDPA NoPE step of step_time.py's baseline, so that both sides can be read
against item 3's bound. Same model as step_time.py (d_model 64, 2 layers, 4 heads, batch 8, T 512,
fp32, AdamW).

    python benchmarks/fused_steps.py --threads 1
    python benchmarks/fused_steps.py --threads 1 --combos cope:xl tra:xl --repeats 9
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
import torch.nn.functional as F

from lengen.model import ModelConfig, Transformer
from lengen.ops import fused_rows

try:                                     # run as a script from the repository root
    from _common import lengen_revision, machine_info, machine_line
except ImportError:                      # pragma: no cover
    from benchmarks._common import lengen_revision, machine_info, machine_line

DEFAULT = ["softmax:xl", "fot:xl", "tra:nope", "tra:xl", "cope:nope", "cope:xl", "cope:fire",
           "cope:kerple_log", "cope:t5"]


def build(attention, posenc, impl="auto"):
    torch.manual_seed(0)
    m = Transformer(ModelConfig(vocab_size=8, d_model=64, n_layers=2, n_heads=4,
                                attention=attention, posenc=posenc, attn_impl=impl))
    return m, torch.optim.AdamW(m.parameters(), 1e-3)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--combos", nargs="+", default=DEFAULT, metavar="KIND:SCHEME",
                    help=f"attention:posenc pairs (default {' '.join(DEFAULT)})")
    ap.add_argument("--repeats", type=int, default=7, help="timed rounds (default 7)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed rounds first (default 1)")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    if fused_rows.kernels() is None:
        raise SystemExit("the C kernel is not available here (no compiler, or switched off)")
    combos = [tuple(c.split(":")) for c in args.combos]
    models = {c: build(*c) for c in combos}
    models["sdpa"] = build("softmax", "nope", impl="lean")
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 8, (8, 512), generator=g)
    y = torch.randint(0, 8, (8, 512), generator=g)

    def step(m, opt):
        out = m(x)
        logits = out if torch.is_tensor(out) else out.logits
        F.cross_entropy(logits.reshape(-1, 8), y.reshape(-1)).backward()
        opt.step()
        opt.zero_grad()

    cases = [("sdpa", None)] + [(c, s) for c in combos for s in ("fused", "tiled")]
    times = {c: [] for c in cases}
    before = os.environ.get("LENGEN_FUSED_ROWS")
    try:
        for r in range(args.warmup + args.repeats):
            for key, side in cases:
                os.environ["LENGEN_FUSED_ROWS"] = "0" if side == "tiled" else "1"
                t0 = time.perf_counter()
                step(*models[key])
                if r >= args.warmup:
                    times[key, side].append(time.perf_counter() - t0)
    finally:
        if before is None:
            os.environ.pop("LENGEN_FUSED_ROWS", None)
        else:
            os.environ["LENGEN_FUSED_ROWS"] = before
    base = times["sdpa", None]
    rows = []
    for c in combos:
        f, t = times[c, "fused"], times[c, "tiled"]
        rows.append(dict(attention=c[0], posenc=c[1], fused_ms=1e3 * statistics.median(f),
                         tiled_ms=1e3 * statistics.median(t),
                         tiled_over_fused=statistics.median([b / a for a, b in zip(f, t)]),
                         fused_over_sdpa=statistics.median([a / s for a, s in zip(f, base)]),
                         tiled_over_sdpa=statistics.median([b / s for b, s in zip(t, base)])))
    setup = dict(repeats=args.repeats, threads=torch.get_num_threads(), lengen=lengen_revision(),
                 sdpa_ms=1e3 * statistics.median(base))
    print("training step, fused-rows kernel on / off (LENGEN_FUSED_ROWS); ratios are medians "
          "over rounds of per-round ratios")
    print(", ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in setup.items()))
    print(machine_line(), flush=True)
    print("| attention | posenc | fused ms | tiled ms | tiled / fused | fused / SDPA | "
          "tiled / SDPA |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['attention']} | {r['posenc']} | {r['fused_ms']:.1f} | {r['tiled_ms']:.1f} | "
              f"{r['tiled_over_fused']:.2f} | {r['fused_over_sdpa']:.2f} | "
              f"{r['tiled_over_sdpa']:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(setup=setup, machine=machine_info(), rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
