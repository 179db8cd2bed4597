"""Index-warping paper, language modelling: RoPE, PI, randomized PE, ALiBi and head/tail warping
(Table 3, Fig. 7, Table B).

Train a GPT-2-style model with each positional method on a short context, evaluate test
perplexity up to 8x (cpu scale: 32x) the context with non-overlapping windows, and write
table3.md, tableB.md, fig7.md/.png, table3.png and findings.md beside the published numbers.
Needs the `warp` and `interpolate` position samplers (issue 12) for PI and the warping models.
The cpu and smoke scales use the offline KJV corpus, a stand-in for WikiText-103 (captions say
so). Finished runs are reused."""
from __future__ import annotations

from lengen.recipes.common import add_corpus_arguments, add_sweep_arguments, exit_code


def add_arguments(q) -> None:
    add_sweep_arguments(q, "index-warping-lm",
                        scale_help="smoke = seconds (tests), cpu = the offline KJV corpus, a "
                                   "2,048-id BPE and a 2-layer d128 GPT-2-style model, 90 min on "
                                   "2 cores with --workers 2 (check with --estimate), paper = "
                                   "WikiText-103, GPT-2 base, context 512, 11k steps (GPU)",
                        seeds_help="seeds (init and data order; default 0)")
    q.add_argument("--models", nargs="+", default=None, metavar="NAME",
                   help="subset (default all): RoPE RoPE+PI RandPE-8072 RandPE-4096 RandPE-1024 "
                        "ALiBi Ours head_only tail_only alpha-2 alpha-4 alpha-8 (RoPE+PI "
                        "evaluates the RoPE run; Ours is head_tail with alpha 1/6)")
    add_corpus_arguments(q)


def run(args) -> int:
    # start-up: the recipe loads when it runs
    from lengen.recipes.index_warping_lm.recipe import estimate_time, run_index_warping_lm

    if args.estimate:
        estimate_time(args.scale, models=args.models, workers=args.workers, threads=args.threads,
                      seeds=len(args.seeds) if args.seeds else None, corpus=args.corpus,
                      data_dir=args.data_dir, device=args.device)
        return 0
    res = run_index_warping_lm(args.scale, args.out, workers=args.workers, seeds=args.seeds,
                               models=args.models, corpus=args.corpus, data_dir=args.data_dir,
                               backend=args.backend, threads=args.threads, device=args.device)
    return exit_code(res)                    # the sweep's failures and RoPE+PI's
