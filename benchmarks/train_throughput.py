"""Training throughput (tokens/s) of every model of the TRA paper's Table 1 at the flip-flop
recipe's sizes, as ratios to the NoPE softmax model measured in the same run (issue 15 item 4:
paper-scale throughput per attention kind).

Each model is the recipe's own config (``lengen.recipes.tra_flipflop.recipe.model_config``:
NoPE, APE, REL, RoPE, Label, FoT, Diff, CoPE, TRA; the paper scale is 4 layers, 4 heads,
d_model 256, T = 512, batch 64), timed through
:func:`lengen.recipes.estimate.time_training_steps` (the training loop's own step: positions,
autocast, optional compile, loss, backward, clipping, AdamW). A round times every model once
(``--steps`` steps after ``--warmup`` untimed ones); the table gives, per model, the median over
``--rounds`` rounds of its tokens/s and of its step time / NoPE's step time of the same round.
Tokens per step = batch x T (every position is an input the step reads; flip-flop scores only the
read instructions' answers).

    python benchmarks/train_throughput.py --device cuda --precision bf16   # paper scale, a GPU
    python benchmarks/train_throughput.py --device cuda --compile --json tp.json
    python benchmarks/train_throughput.py --scale cpu --steps 3 --rounds 1  # CPU (minutes)
    python benchmarks/train_throughput.py --scale smoke --steps 2 --rounds 1 # seconds: harness

Run on an otherwise idle machine; the paper scale on a CPU takes seconds per step per model.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import lengen_revision, machine_info, machine_line  # noqa: E402

import lengen  # noqa: E402
from lengen.recipes.estimate import time_training_steps  # noqa: E402
from lengen.recipes.tra_flipflop import recipe as tf  # noqa: E402
from lengen.train.loop import prepare  # noqa: E402

BASELINE = "NoPE"


def build(model: str, args):
    cfg = tf.model_config(model, args.scale, 0, device=args.device)
    cfg["train"].update(precision=args.precision, compile=args.compile)
    resolved = lengen.resolve(cfg)
    task, net = prepare(resolved)
    return resolved.config, task, net


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", choices=tuple(tf.SCALES), default="paper",
                    help="the flip-flop recipe's sizes (default paper: 4 layers, d_model 256, "
                         "T = 512, batch 64)")
    ap.add_argument("--models", nargs="+", default=None, metavar="M",
                    help=f"Table 1 models (default: all registered; {', '.join(tf.MODELS)})")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                    help="torch device (default cuda when present)")
    ap.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32",
                    help="train.precision (autocast; fp16 with loss scaling)")
    ap.add_argument("--compile", action="store_true", help="train.compile (torch.compile)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per model per round")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first (compilation)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    ap.add_argument("--json", help="also write the rows to this JSON file")
    args = ap.parse_args(argv)
    print(machine_line(), flush=True)
    if args.threads:
        torch.set_num_threads(args.threads)
    models = list(args.models or tf.MODELS)
    tf.check_available(models)
    if BASELINE not in models:
        models.insert(0, BASELINE)
    built = {m: build(m, args) for m in models}
    cfg0 = built[BASELINE][0]
    T = built[BASELINE][1].train_batch(1, torch.Generator().manual_seed(0)).inputs.shape[1]
    tokens = cfg0.train.batch_size * T
    print(f"lengen={lengen_revision()} torch {torch.__version__} device {args.device} "
          f"({torch.cuda.get_device_name() if args.device.startswith('cuda') else platform.processor() or platform.machine()}); "
          f"scale {args.scale}: d_model {cfg0.model.d_model}, {cfg0.model.n_layers} layers, "
          f"{cfg0.model.n_heads} heads, T = {T}, batch {cfg0.train.batch_size}; "
          f"precision {args.precision}, compile {args.compile}")
    secs: dict[str, list[float]] = {m: [] for m in models}
    for r in range(args.rounds):
        for m in models:
            cfg, task, net = built[m]
            secs[m].append(time_training_steps(cfg, task, net, steps=args.steps,
                                               warmup=args.warmup if r == 0 else 1,
                                               device=args.device))
    rows = []
    for m in models:
        ratio = statistics.median(a / b for a, b in zip(secs[m], secs[BASELINE]))
        step = statistics.median(secs[m])
        rows.append({"model": m, "attention": built[m][0].model.attention,
                     "posenc": built[m][0].model.posenc, "step_ms": 1000 * step,
                     "tokens_per_s": tokens / step, "vs_nope": ratio,
                     "params": sum(p.numel() for p in built[m][2].parameters())})
    print(f"\n| model | attention | posenc | step (ms) | tokens/s | step / {BASELINE} step |")
    print("|:--|:--|:--|--:|--:|--:|")
    for r in rows:
        print(f"| {r['model']} | {r['attention']} | {r['posenc']} | {r['step_ms']:.1f} | "
              f"{r['tokens_per_s']:,.0f} | {r['vs_nope']:.2f} |")
    if args.json:
        meta = {"revision": lengen_revision(), "machine": machine_info(),
                "device": args.device, "scale": args.scale,
                "precision": args.precision, "compile": args.compile, "T": T,
                "batch": cfg0.train.batch_size, "steps": args.steps, "rounds": args.rounds}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
