"""Ruoss et al. 2023 Tables 1/4 and Fig. 4/5: standard vs randomized positional encodings on the
Chomsky tasks.

Train the paper's encoder on tasks x encodings x seeds x learning rates, evaluate over test lengths
N+1..M, and write table1.md/.csv, table4.md, curves/<task>.png, the Fig. 5 activation PCA (plus
the L and sorting ablations if asked) beside the published numbers. Finished runs are reused."""
from __future__ import annotations

from lengen.cliutil import int_at_least, positive_float
from lengen.recipes.common import add_sweep_arguments, exit_code


def add_arguments(q) -> None:
    add_sweep_arguments(q, "randomized-pe",
                        scale_help="smoke = seconds (tests), cpu = 5 tasks x 4 encodings with "
                                   "per-task (and per-encoding) steps / batch / lr / seeds, <= 2 h "
                                   "on 2 cores with --workers 2 (check with --estimate), paper = "
                                   "15 tasks x 11 encodings x 10 seeds x 3 lrs, 2M steps (GPU)",
                        seeds_help="seeds (init and data order; default: each task's at the "
                                   "scale, e.g. 0 1, 0 for duplicate string at cpu)")
    q.add_argument("--tasks", nargs="+", default=None, metavar="TASK",
                   help="subset of tasks (default: the scale's; e.g. even_pairs reverse_string)")
    q.add_argument("--schemes", nargs="+", default=None, metavar="ENC",
                   help="subset of encodings: none sincos relative alibi rope learned "
                        "rand_sincos rand_relative rand_alibi rand_rope rand_learned "
                        "(default: the scale's)")
    q.add_argument("--lrs", type=positive_float, nargs="+", default=None, metavar="LR",
                   help="learning rates (default: each task's at the scale; paper 1e-4 3e-4 "
                        "5e-4)")
    ev = q.add_mutually_exclusive_group()
    ev.add_argument("--eval-randomized", dest="eval_randomized", action="store_true",
                    default=True, help="randomized encodings keep drawing fresh sorted "
                                       "positions at evaluation, as the paper (default)")
    ev.add_argument("--eval-identity", dest="eval_randomized", action="store_false",
                    help="randomized encodings use positions 0..T-1 at evaluation instead "
                         "(output folder gets -evalid appended)")
    q.add_argument("--ablation-L", dest="ablation_L", type=int_at_least(1), nargs="*",
                   default=None, metavar="L",
                   help="also train randomized relative at these maximum positions L on "
                        "reverse_string and missing_duplicate_string (Fig. 3); no values = the "
                        "scale's (paper: 1024 2048 4096 8192); L must hold the longest test input")
    q.add_argument("--ablation-unsorted", action="store_true",
                   help="also train randomized sin/cos without sorting the positions (Table 3)")


def run(args) -> int:
    # start-up: the recipe loads when it runs
    from lengen.recipes.randomized_pe.recipe import estimate_time, run_randomized_pe

    if args.estimate:
        estimate_time(args.scale, tasks=args.tasks, schemes=args.schemes, workers=args.workers,
                      threads=args.threads, device=args.device,
                      seeds=len(args.seeds) if args.seeds else None,
                      lrs=len(args.lrs) if args.lrs else None)
        return 0
    return exit_code(run_randomized_pe(args.scale, args.out, workers=args.workers,
                                       tasks=args.tasks, schemes=args.schemes, seeds=args.seeds,
                                       lrs=args.lrs, eval_randomized=args.eval_randomized,
                                       ablation_L=args.ablation_L,
                                       ablation_unsorted=args.ablation_unsorted,
                                       backend=args.backend, threads=args.threads,
                                       device=args.device))
