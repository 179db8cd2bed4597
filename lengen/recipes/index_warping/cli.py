"""Index-warping paper (Sec. 5.1): RoPE, RoPE+PI, ALiBi, randomized PE and index warping on
copy / reverse / sort / summation.

Train the columns of Fig. 5 / Table A / Fig. 6 / Fig. C on the four tasks, evaluate sequence
accuracy at every test length 2..5M (strided at the cpu scale), and write table_a.md/.csv and the
accuracy-vs-length figures beside the published Table A. Finished runs are reused."""
from __future__ import annotations

from lengen.recipes.common import add_sweep_arguments, exit_code


def add_arguments(q) -> None:
    add_sweep_arguments(q, "index-warping",
                        scale_help="smoke = seconds (tests), cpu = 4 tasks x 7 columns x 1 seed "
                                   "with a small decoder, about 1.8 h on 2 cores with "
                                   "--workers 2 (check with --estimate), paper = the T5-base "
                                   "decoder, 40k steps, 3 seeds (GPU)",
                        seeds_help="seeds (init and data order; default: the scale's)")
    q.add_argument("--tasks", nargs="+", default=None, metavar="TASK",
                   help="subset of tasks: copy reverse sort summation (default: the scale's)")
    q.add_argument("--models", nargs="+", default=None, metavar="COL",
                   help="subset of columns: rope rope_pi alibi rpe_10m rpe_5m rpe_3m ours_sqrt "
                        "ours_beta head_only tail_only (default: the scale's; cpu: all but "
                        "rpe_10m rpe_5m ours_beta)")
    q.add_argument("--length-unit", choices=("tokens", "items"), default="tokens",
                   help="what M and L_te of position interpolation count (default tokens: the "
                        "model input; items: the paper's item counts)")
    q.add_argument("--rotary-fraction", type=float, default=1.0, metavar="F",
                   help="RoPE rotates this fraction of each head (default 1: the paper's "
                        "formula; Kazemnejad et al.'s code: 0.25)")


def run(args) -> int:
    # start-up: the recipe loads when it runs
    from lengen.recipes.index_warping.recipe import estimate_time, run_index_warping

    if args.estimate:
        estimate_time(args.scale, tasks=args.tasks, models=args.models, workers=args.workers,
                      threads=args.threads, device=args.device,
                      seeds=len(args.seeds) if args.seeds else None)
        return 0
    return exit_code(run_index_warping(args.scale, args.out, workers=args.workers,
                                       tasks=args.tasks, models=args.models, seeds=args.seeds,
                                       length_unit=args.length_unit,
                                       rotary_fraction=args.rotary_fraction,
                                       backend=args.backend, threads=args.threads,
                                       device=args.device))
