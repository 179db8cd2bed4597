"""Zhou et al. 2024 decimal addition: FIRE / KerpleLog / RoPE / NoPE, index hints, formats, random
spaces, randomized positions, position coupling and Abacus; EM vs length and error analysis.

Train the grid of settings x trials (plus, where the scale or a flag asks, FIRE at other training
lengths and on an init x data-order grid), evaluate exact match at every test length, analyse
greedy answers (carry, wrong digits, positions), and write table.md, claims.md (the paper's
stated claims beside ours, each with a verdict by a rule fixed in the code), errors.md and the
figures (Figs. 3, 4, 5, 7, 8, 9, 11, 13, C.1, C.4-C.7, C.10). Finished runs are reused; a
diverging run is recorded in the report and the sweep goes on; --part K/N runs one part of the
grid and reports on every finished run."""
from __future__ import annotations

import argparse

from lengen.recipes.common import add_sweep_arguments, parse_part


def _part(text: str):
    try:
        return parse_part(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_arguments(q) -> None:
    add_sweep_arguments(q, "addition", scales=("smoke", "cpu", "cpu-5k", "gpu", "paper"),
                        scale_help="smoke = seconds (tests); cpu = a small model (2 blocks, "
                                   "d_model 64), train 1..10 digits, test 1..20, at the budget "
                                   "the Fig. 3 search found (8,000 steps at batch 128, lr per "
                                   "setting), the four PEs, FIRE's four ablations, coupling "
                                   "and Abacus on 3 seeds each: 30 runs, about 4 h on 2 cores "
                                   "with --workers 2, best in three parts (--part 1/3 ...); "
                                   "cpu-5k = the first cpu scale (5,000 steps at batch 32, "
                                   "results/addition-cpu); gpu = the paper's 5M "
                                   "model, train 1..10, test to 50, 4,000 steps, 3 trials for "
                                   "the PEs and 2 per ablation, sized for one GPU shared by "
                                   "--workers 14 (results/addition-gpu); paper = the 25M model, "
                                   "1..40 -> 100 digits, 10 trials, 50k steps (GPU)",
                        seeds_help="trials = weight-initialisation seeds for every setting "
                                   "(default: the scale's, e.g. 0 1 2 at cpu); the data order "
                                   "is seed 0")
    q.add_argument("--settings", nargs="+", default=None, metavar="SETTING",
                   help="subset of settings (default: the scale's), e.g. fire rope "
                        "fire-nohints coupling; see lengen.recipes.addition.specs.SETTINGS")
    q.add_argument("--part", type=_part, default=None, metavar="K/N",
                   help="train only part K of N of the grid (the runs ordered by seed, then "
                        "setting; at cpu --part 1/3 is seed 0 of every setting); the report "
                        "covers every finished run in --out and names the ones not run yet")
    q.add_argument("--train-lengths", dest="train_lengths", action="store_true", default=None,
                   help="also train FIRE at the scale's other training lengths (Fig. 13; on by "
                        "default except at cpu)")
    q.add_argument("--no-train-lengths", dest="train_lengths", action="store_false",
                   help="skip FIRE at the other training lengths (Fig. 13)")
    q.add_argument("--heatmap", dest="heatmap", action="store_true", default=None,
                   help="also train FIRE on the init x data-order grid (Fig. 11; on by default "
                        "except at cpu)")
    q.add_argument("--no-heatmap", dest="heatmap", action="store_false",
                   help="skip FIRE on the init x data-order grid (Fig. 11)")


def run(args) -> int:
    # start-up: the recipe loads when it runs
    from lengen.recipes.addition.recipe import estimate_time, run_addition_recipe

    if args.estimate:
        estimate_time(args.scale, settings=args.settings, trials=args.seeds,
                      train_lengths=args.train_lengths, heatmap=args.heatmap,
                      workers=args.workers, threads=args.threads, device=args.device,
                      part=args.part)
        return 0
    res = run_addition_recipe(args.scale, args.out, workers=args.workers, settings=args.settings,
                              trials=args.seeds, train_lengths=args.train_lengths,
                              heatmap=args.heatmap, backend=args.backend, threads=args.threads,
                              device=args.device, part=args.part)
    return 1 if res["failed"] else 0
