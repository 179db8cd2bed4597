"""Where a training step of the recipes' cpu-scale models goes, against the GEMM roofline of the
machine it runs on (issue 31 item 5).

For each model (the same recipe configs as ``benchmarks/vs_commit.py``: flip-flop TRA / FoT /
NoPE, addition FIRE, copy RoPE; seed 0, this checkout) the script

* times the training loop's own step (``lengen.recipes.estimate.time_training_steps``, median of
  ``--repeats`` calls of ``--steps`` steps, one thread by default);
* profiles ``--steps`` steps (``torch.profiler``) and splits their time into the **linear
  layers' GEMMs** (``aten::mm`` / ``aten::addmm`` outside attention), **attention** (the whole of
  SDPA's forward and backward ops, or of the tiled CPU op's autograd Function: its matmuls, tile
  passes and C kernels) and **the rest** (elementwise ops, norms, loss, AdamW, batch generation,
  dispatch);
* counts the FLOPs the model needs: the linear layers' from ``torch.utils.flop_counter`` on one
  forward + backward (mm / addmm), and attention's analytically as a causal kernel needs them,
  ``6 T^2 hd`` per (sequence, head, layer) (forward q.k and p.v on the lower triangle, backward
  four such products; the tiled ops compute more: whole tiles and, for biases, windows);
* measures the machine's GEMM rate in the same run: ``torch.mm`` of two 1024 x 1024 fp32
  matrices (best of ``--repeats``), the roofline's peak.

The roofline step is (linear + attention FLOPs) / that peak: the time the step would take if it
were nothing but its matmuls, each at the best GEMM rate. The table gives each part's time, the
linear GEMMs' and attention's achieved rates, step / roofline, and the speed-up bound with
attention as it is: step / (linear FLOPs at the peak + attention's measured time), what is left
if everything else took no time. The parts come from a profiled run (the profiler adds some
time to every op), the step time from an unprofiled one; "rest" is their difference.

    python benchmarks/roofline.py                     # all five models, one thread
    python benchmarks/roofline.py --models flipflop:TRA --steps 5 --json roof.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import lengen_revision, machine_info, machine_line  # noqa: E402
from vs_commit import MODELS as _VS_MODELS  # noqa: E402  (the same five recipe models)

import lengen  # noqa: E402
from lengen.recipes import estimate  # noqa: E402
from lengen.rundir.load import prepare  # noqa: E402

MODELS = tuple(_VS_MODELS)
LINEAR = ("aten::mm", "aten::addmm")


def build(key: str):
    recipe, name = _VS_MODELS[key]                 # e.g. reverse:relative -> randomized-PE's
    if recipe == "flipflop":
        from lengen.recipes.tra_flipflop import recipe as r
        cfg = r.model_config(name, "cpu", 0)
    elif recipe == "addition":
        from lengen.recipes.addition.specs import run_config
        cfg = run_config(name, "cpu-5k", 0)     # the batch-32 model vs_commit.py times
    elif recipe == "randomized":
        from lengen.recipes.randomized_pe.recipe import run_config
        cfg = run_config("reverse_string", name, "cpu", 0)
    else:
        from lengen.recipes.index_warping.recipe import run_config
        cfg = run_config(recipe, name, "cpu", 0)
    resolved = lengen.resolve(cfg)
    task, net = prepare(resolved)
    return resolved.config, task, net


def gemm_peak(repeats: int) -> float:
    """FLOP/s of a 1024^3 fp32 ``torch.mm`` (best of ``repeats``)."""
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    out = torch.empty(1024, 1024)
    torch.mm(a, b, out=out)
    best = min(_timed(lambda: torch.mm(a, b, out=out)) for _ in range(max(3, repeats)))
    return 2 * 1024 ** 3 / best


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def is_attention(name: str) -> bool:
    return "FastCPU" in name or "FusedRows" in name or "scaled_dot_product" in name


def split_profile(prof, steps: int) -> dict:
    """ms per step of linear GEMMs (outside attention), attention (outermost attention events,
    forward and backward) and the total profiled CPU time of the top-level events."""
    lin = att = 0.0
    for e in prof.events():
        anc, inside = e.cpu_parent, False
        while anc is not None:
            if is_attention(anc.name):
                inside = True
                break
            anc = anc.cpu_parent
        if e.name in LINEAR and not inside:
            lin += e.self_cpu_time_total
        elif is_attention(e.name) and not inside:
            att += e.cpu_time_total
    return {"linear_ms": lin / 1e3 / steps, "attention_ms": att / 1e3 / steps}


def linear_flops(cfg, task, net) -> tuple[float, int, int, int, int]:
    """(FLOPs of mm / addmm in one forward + backward of a training batch, B, T, layers x heads,
    head dim)."""
    from torch.utils.flop_counter import FlopCounterMode

    from lengen.train.step import forward_loss

    batch = task.train_batch(cfg.train.batch_size, torch.Generator().manual_seed(0))
    B, T = batch.inputs.shape
    net.train()
    pos = net.sample_positions(T, batch_size=B, device="cpu",
                               generator=torch.Generator().manual_seed(0), batch=batch)
    counter = FlopCounterMode(display=False)
    with counter:
        loss = forward_loss(net, batch, pos, cfg.train, torch.device("cpu"),
                            getattr(task, "output_slice", None))
        loss.backward()
    net.zero_grad(set_to_none=True)
    counts = counter.get_flop_counts().get("Global", {})
    lin = sum(v for op, v in counts.items() if str(op).split(".")[1] in ("mm", "addmm"))
    m = cfg.model
    return float(lin), B, T, m.n_layers * m.n_heads, m.d_model // m.n_heads


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS),
                    metavar="M", help=f"recipe:model keys (default all: {', '.join(MODELS)})")
    ap.add_argument("--steps", type=int, default=5, help="steps per timing call and profiled")
    ap.add_argument("--repeats", type=int, default=3, help="timing calls (median)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    ap.add_argument("--json", default=None, help="write the rows here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    estimate.use_threads = lambda *a, **k: None          # keep --threads
    print(machine_line())
    peak = gemm_peak(args.repeats)
    print(f"lengen {lengen_revision()}, threads {args.threads}; GEMM peak (1024^3 fp32 mm): "
          f"{peak / 1e9:.1f} GFLOP/s")
    from torch.profiler import ProfilerActivity, profile

    rows = []
    for key in args.models:
        cfg, task, net = build(key)
        lin_f, B, T, LH, hd = linear_flops(cfg, task, net)
        # per (sequence, head, layer): q.k and p.v over the T^2 / 2 causal pairs, 2 hd flops a
        # pair (forward), four such products backward: 6 x 2 hd x T^2 / 2 = 6 T^2 hd
        att_f = 6.0 * B * LH * T * T * hd
        estimate.time_training_steps(cfg, task, net, steps=1, warmup=2)
        step = statistics.median(estimate.time_training_steps(cfg, task, net, steps=args.steps,
                                                              warmup=0)
                                 for _ in range(args.repeats))
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            estimate.time_training_steps(cfg, task, net, steps=args.steps, warmup=0)
        parts = split_profile(prof, args.steps)
        step_ms = step * 1e3
        roof_ms = (lin_f + att_f) / peak * 1e3
        row = dict(model=key, B=B, T=T, step_ms=step_ms, linear_ms=parts["linear_ms"],
                   attention_ms=parts["attention_ms"],
                   rest_ms=step_ms - parts["linear_ms"] - parts["attention_ms"],
                   linear_gflop=lin_f / 1e9, attention_gflop=att_f / 1e9,
                   linear_gflops=lin_f / 1e9 / (parts["linear_ms"] / 1e3),
                   attention_gflops=att_f / 1e9 / (parts["attention_ms"] / 1e3),
                   roofline_ms=roof_ms, step_over_roofline=step_ms / roof_ms,
                   # the speed-up left if the rest took no time and the linear GEMMs ran at
                   # the peak, attention as it is
                   bound_attention_as_is=step_ms / (lin_f / peak * 1e3 + parts["attention_ms"]))
        rows.append(row)
        print(f"  {key}: step {step_ms:.1f} ms", flush=True)
    print("| model | B x T | step ms | linear GEMM ms (GFLOP/s) | attention ms (GFLOP/s) | "
          "rest ms | roofline ms (GFLOP: linear + attention) | step / roofline | "
          "speed-up bound, attention as is |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['B']} x {r['T']} | {r['step_ms']:.1f} | "
              f"{r['linear_ms']:.1f} ({r['linear_gflops']:.0f}) | {r['attention_ms']:.1f} "
              f"({r['attention_gflops']:.1f}) | {r['rest_ms']:.1f} | {r['roofline_ms']:.1f} "
              f"({r['linear_gflop']:.2f} + {r['attention_gflop']:.2f}) | "
              f"{r['step_over_roofline']:.1f} | {r['bound_attention_as_is']:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(machine=machine_info(), lengen=lengen_revision(),
                           peak_gflops=peak / 1e9, rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
