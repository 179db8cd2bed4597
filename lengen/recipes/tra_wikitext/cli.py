"""TRA paper Appendix B: nine models as language models, perplexity vs length (Table 2, Fig. 4).

Train NoPE, APE, REL, RoPE, Label, FoT, Diff, CoPE and TRA with a 128-token window and evaluate
test perplexity at 1x .. 32x the window (non-overlapping windows); write table2.md/.csv and
fig4.md/.csv/.png beside the published numbers. The cpu and smoke scales use the offline KJV
corpus, a stand-in for WikiText-103 (captions say so). Finished runs are reused."""
from __future__ import annotations

from lengen.recipes.common import add_corpus_arguments, add_sweep_arguments, exit_code
from lengen.recipes.tra_models import add_model_arguments


def add_arguments(q) -> None:
    add_sweep_arguments(q, "tra-wikitext",
                        scale_help="smoke = seconds (tests), cpu = the offline KJV corpus, a "
                                   "2,048-id BPE and a 2-layer d128 model, 90 min on 2 cores with "
                                   "--workers 2 (check with --estimate), paper = WikiText-103, "
                                   "GPT-2 BPE, 8 layers x 512, 100k steps, 4 seeds (GPU)",
                        seeds_help="seeds (init and data order; default: the scale's, 0 for "
                                   "cpu, 0 1 2 3 for paper)")
    add_model_arguments(q, "Table 2")
    add_corpus_arguments(q)


def run(args) -> int:
    # start-up: the recipe loads when it runs
    from lengen.recipes.tra_wikitext.recipe import estimate_time, run_tra_wikitext

    if args.estimate:
        estimate_time(args.scale, models=args.models, workers=args.workers, threads=args.threads,
                      seeds=len(args.seeds) if args.seeds else None, rel=args.rel,
                      corpus=args.corpus, data_dir=args.data_dir, device=args.device)
        return 0
    return exit_code(run_tra_wikitext(args.scale, args.out, workers=args.workers,
                                      seeds=args.seeds, models=args.models, rel=args.rel,
                                      corpus=args.corpus, data_dir=args.data_dir,
                                      backend=args.backend, threads=args.threads,
                                      device=args.device))
