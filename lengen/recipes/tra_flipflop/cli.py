"""TRA paper Table 1: nine models on flip-flop (IID / OOD dense / OOD sparse).

Train NoPE, APE, REL, RoPE, Label, FoT, Diff, CoPE and TRA on flip-flop over several seeds and
write table.md/.csv/.png beside the published Table 1 (and the Appendix A heatmaps on request).
Finished runs are reused; an interrupted sweep resumes."""
from __future__ import annotations

from lengen.cliutil import int_at_least
from lengen.recipes.common import add_sweep_arguments, exit_code
from lengen.recipes.tra_flipflop.specs import SCALES
from lengen.recipes.tra_models import add_model_arguments


def add_arguments(q) -> None:
    add_sweep_arguments(q, "tra-flipflop",
                        scale_help="smoke = seconds (tests), cpu = the CPU-sized protocol on 2 "
                                   "cores with --workers 2 (see the recipe docstring), paper = "
                                   "the paper's model and 25k steps (GPU), width = the paper's "
                                   "width (d_model 256, MLP 512) at 256 tokens, 2,500 steps, "
                                   "OOD curves every 250 steps (GPU)",
                        scales=tuple(SCALES),
                        seeds_help="seeds (init and data order; default: the scale's, e.g. "
                                   "0 1 2 for cpu)")
    add_model_arguments(q, "Table 1")
    q.add_argument("--heatmaps", action="store_true",
                   help="also train the Appendix A pair (2-layer 1-head TRA and FoT) and plot "
                        "their final-layer attention on an OOD-sparse sequence")
    q.add_argument("--heatmap-seeds", type=int_at_least(0), nargs="+", default=[0], metavar="S",
                   help="with --heatmaps: train the pair once per seed (default: 0); writes "
                        "pair.png for seed 0, pair-sK.png for seed K, and heatmaps/summary.md "
                        "with each model's accuracy")


def run(args) -> int:
    # start-up: the recipe loads when it runs
    from lengen.recipes.tra_flipflop.recipe import estimate_time, run_tra_flipflop

    if args.estimate:
        estimate_time(args.scale, models=args.models, workers=args.workers, threads=args.threads,
                      seeds=len(args.seeds) if args.seeds else None, device=args.device)
        return 0
    return exit_code(run_tra_flipflop(args.scale, args.out, workers=args.workers,
                                      seeds=args.seeds, models=args.models, rel=args.rel,
                                      heatmaps=args.heatmaps, heatmap_seeds=args.heatmap_seeds,
                                      backend=args.backend, threads=args.threads,
                                      device=args.device))
