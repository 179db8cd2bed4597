"""The ``lengen`` command: a thin layer that parses arguments and calls the library.

    lengen [--debug] COMMAND ...
    lengen train [--config FILE] [--run-dir DIR] [--no-resume | --fresh] [key.path=value ...]
    lengen eval RUN_DIR [--splits iid sparse dense] [--sequences N]
    lengen generate RUN_DIR [--split len=K | --prompt 'tokens ...'] [--n N]
    lengen demo [--out DIR] [--steps N]
    lengen reproduce tra-flipflop [--scale smoke|cpu|paper] [--out DIR] [--workers N] [--seeds ...]
    lengen reproduce randomized-pe [--scale smoke|cpu|paper] [--tasks ...] [--schemes ...]
                                   [--ablation-L [L ...]] [--ablation-unsorted] [--estimate]
    lengen plot attention RUN_DIR [--split sparse] [--layer -1] [--head 0] [--out FILE] [--index N]
    lengen analyze idealized [--out DIR] [--d D ...] [...]
    lengen list

Every error a user can fix is printed as one paragraph (what is wrong, where, how to fix it) with
exit status 2 and no traceback; ``--debug`` (anywhere on the line) shows the traceback too.
Validation lives in the library, so ``lengen.resolve`` / ``lengen.train`` raise the same errors.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import time

from lengen.cliutil import (int_at_least, is_user_error, looks_like_override, message,
                            not_an_override, positive_float, silence_stdout)

def _add_common_train(p):
    p.add_argument("--config", metavar="FILE", help="YAML or JSON experiment config "
                   "(sections: model, task, train, eval); overrides are applied on top")
    p.add_argument("overrides", nargs="*", metavar="key.path=value",
                   help="dotted overrides, e.g. model.attention=tra train.steps=500 "
                        "model.attention_kwargs.qk_norm=false (before or after the flags)")


def cmd_train(args) -> int:
    from lengen.config import load_config_file, resolve
    from lengen.train import train

    not_an_override("--config", args.config)
    not_an_override("--run-dir", args.run_dir)
    cfg = resolve(load_config_file(args.config) if args.config else {}, args.overrides)
    run_dir = args.run_dir or os.path.join("runs", cfg.name or time.strftime("run-%Y%m%d-%H%M%S"))
    print(f"run directory: {run_dir}")
    _, _, rows = train(cfg, run_dir, resume=not args.no_resume, fresh=args.fresh)
    if rows:
        print_rows(rows)
    return 0


def cmd_eval(args) -> int:
    from lengen.train.runs import evaluate_run

    rows = evaluate_run(args.run_dir, splits=args.splits, sequences=args.sequences,
                        batch_size=args.batch_size, seed=args.seed, device=args.device,
                        out=args.out, progress=True)
    print_rows(rows)
    print(f"wrote {os.path.join(args.run_dir, args.out)}.json and .csv")
    png = os.path.join(args.run_dir, f"{args.out}.png")
    if os.path.exists(png):                 # a sweep over >= 2 lengths: accuracy vs length
        print(f"wrote {png}")
    return 0


def cmd_generate(args) -> int:
    from lengen.eval.generation import run_generate

    print(run_generate(args.run_dir, split=args.split, prompt=args.prompt, n=args.n,
                       seed=args.seed, device=args.device))
    return 0


def cmd_demo(args) -> int:
    from lengen.recipes.demo import run_demo

    run_demo(out_dir=args.out, steps=args.steps, models=args.models, eval_sequences=args.sequences,
             threads=args.threads)
    return 0


def cmd_reproduce_tra(args) -> int:
    from lengen.recipes.tra_flipflop import estimate_time, run_tra_flipflop

    if args.estimate:
        estimate_time(args.scale, models=args.models, workers=args.workers, threads=args.threads,
                      seeds=len(args.seeds) if args.seeds else None, device=args.device)
        return 0
    res = run_tra_flipflop(args.scale, args.out, workers=args.workers, seeds=args.seeds,
                           models=args.models, rel=args.rel, heatmaps=args.heatmaps,
                           heatmap_seeds=args.heatmap_seeds,
                           backend=args.backend, threads=args.threads, device=args.device)
    return 1 if res["sweep"].failures else 0


def cmd_reproduce_rpe(args) -> int:
    from lengen.recipes.randomized_pe import estimate_time, run_randomized_pe

    if args.estimate:
        estimate_time(args.scale, tasks=args.tasks, schemes=args.schemes, workers=args.workers,
                      threads=args.threads, device=args.device,
                      seeds=len(args.seeds) if args.seeds else None,
                      lrs=len(args.lrs) if args.lrs else None)
        return 0
    res = run_randomized_pe(args.scale, args.out, workers=args.workers, tasks=args.tasks,
                            schemes=args.schemes, seeds=args.seeds, lrs=args.lrs,
                            eval_randomized=args.eval_randomized, ablation_L=args.ablation_L,
                            ablation_unsorted=args.ablation_unsorted, backend=args.backend,
                            threads=args.threads, device=args.device)
    return 1 if res["sweep"].failures else 0


def cmd_plot_attention(args) -> int:
    from lengen.analysis.heatmap import plot_attention

    out = plot_attention(args.run_dir, split=args.split, layer=args.layer, head=args.head,
                         out=args.out, seed=args.seed, index=args.index,
                         first_error=args.first_error, cmap=args.cmap)
    print(f"wrote {out}")
    return 0


# Analyses (formulas or finished runs; never training): name -> module providing
# ``add_arguments(parser)`` and ``run(args) -> int``. A new analysis is one line here.
ANALYSES = {
    "idealized": "lengen.analysis.idealized",
}


def cmd_list(args) -> int:
    from lengen import ATTENTIONS, POSENCS, SAMPLERS, TASKS
    from lengen.registry import describe

    registries = (("positional schemes (model.posenc)", POSENCS),
                  ("attention kinds (model.attention)", ATTENTIONS),
                  ("position samplers (model.positions)", SAMPLERS),
                  ("tasks (task.name)", TASKS))
    width = max(len(name) for _, reg in registries for name in reg)
    for title, reg in registries:
        print(f"{title}:")
        for name, obj in reg.items():
            print(f"  {name:<{width}}  {describe(obj, reg)}".rstrip())
    return 0


def print_rows(rows) -> None:
    table = {}
    for r in rows:
        table.setdefault(r["split"], {})[r["metric"]] = r["value"]
    metrics = ["seq_acc", "token_acc", "glitch_rate", "nll"]
    present = list(dict.fromkeys(r["metric"] for r in rows))
    if not set(present) <= set(metrics):        # e.g. language modelling: ppl, nll
        metrics = present
    print(f"{'split':<10}" + "".join(f"{m:>13}" for m in metrics))
    for split, vals in table.items():
        print(f"{split:<10}" + "".join(f"{vals.get(m, float('nan')):>13.4f}" for m in metrics))


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="lengen", description="Length generalization in transformers: "
                                 "train short, test long/sparse/dense, compare positional schemes.")
    ap.add_argument("--debug", action="store_true",
                    help="show the full traceback of an error (allowed anywhere on the line)")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("train", help="train (or resume) one run", description="Train one model; "
                       "resumes from the run directory's last checkpoint if there is one.")
    _add_common_train(p)
    p.add_argument("--run-dir", metavar="DIR", help="run directory (default runs/<name or time>)")
    resume = p.add_mutually_exclusive_group()
    resume.add_argument("--no-resume", action="store_true",
                        help="start from step 0; refused if the run directory already holds a "
                             "run (see --fresh)")
    resume.add_argument("--fresh", action="store_true",
                        help="move an existing run in the run directory to RUN_DIR/previous/"
                             "<time>/ (nothing is deleted) and start over")
    p.set_defaults(fn=cmd_train)

    p = sub.add_parser("eval", help="evaluate a trained run on named splits",
                       description="Evaluate a run directory's weights; writes rows as JSON and CSV.")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory made by lengen train")
    p.add_argument("--splits", nargs="+", metavar="SPLIT",
                   help="splits to evaluate (default: the config's or the task's, e.g. iid sparse dense)")
    p.add_argument("--sequences", type=int_at_least(1), metavar="N",
                   help="sequences per split (default: config)")
    p.add_argument("--batch-size", type=int_at_least(1), metavar="N",
                   help="evaluation batch size (default: config; results do not depend on it)")
    p.add_argument("--seed", type=int_at_least(0), metavar="S",
                   help="evaluation data seed (default: config)")
    p.add_argument("--device", default="cpu", help="torch device (default cpu)")
    p.add_argument("--out", default="eval", metavar="STEM",
                   help="output file stem inside RUN_DIR (default eval -> eval.json, eval.csv)")
    p.set_defaults(fn=cmd_eval)

    p = sub.add_parser("generate", help="show a sequence-task model's greedy answers",
                       description="Greedy-decode evaluation examples (or one prompt) of a "
                                   "decoder sequence task run and print prompt, target and output "
                                   "with the first wrong token marked >>x<<.")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory made by lengen train")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--split", metavar="len=K",
                     help="evaluation split to draw examples from (default: the first length "
                          "beyond training)")
    src.add_argument("--prompt", metavar="'TOKENS'",
                     help="one prompt as space-separated token names, items only ('a b c') or "
                          "complete ('[COPY] a b c [SEP]')")
    p.add_argument("--n", type=int, default=8, metavar="N", help="examples to show (default 8)")
    p.add_argument("--seed", type=int, metavar="S", help="evaluation data seed (default: config)")
    p.add_argument("--device", default="cpu", help="torch device (default cpu)")
    p.set_defaults(fn=cmd_generate)

    p = sub.add_parser("demo", help="the CPU-sized main job: TRA vs baselines on flip-flop",
                       description="Train TRA, NoPE, RoPE and FoT on flip-flop at a CPU-sized "
                                   "configuration and print the IID / sparse / dense table.")
    p.add_argument("--out", default="runs/demo", metavar="DIR", help="output folder (default runs/demo)")
    p.add_argument("--steps", type=int_at_least(1), default=None, metavar="N",
                   help="training steps per model (default: the demo's tuned value)")
    p.add_argument("--models", nargs="+", default=None, metavar="NAME",
                   help="subset of demo models (default: nope rope fot tra)")
    p.add_argument("--sequences", type=int_at_least(1), default=None, metavar="N",
                   help="evaluation sequences per split (default: the demo's)")
    p.add_argument("--threads", type=int_at_least(0), default=0, metavar="N",
                   help="torch CPU threads (default: torch's choice)")
    p.set_defaults(fn=cmd_demo)

    p = sub.add_parser("reproduce", help="reproduce a paper's table (train, evaluate, tabulate)",
                       description="Paper reproductions: sweeps of runs plus the paper's table "
                                   "layout with the published numbers beside ours.")
    rsub = p.add_subparsers(dest="experiment", required=True, metavar="EXPERIMENT",
                            help="which reproduction (tra-flipflop, randomized-pe)")
    q = rsub.add_parser("tra-flipflop", help="TRA paper Table 1: nine models on flip-flop "
                        "(IID / OOD dense / OOD sparse)",
                        description="Train NoPE, APE, REL, RoPE, Label, FoT, Diff, CoPE and TRA "
                                    "on flip-flop over several seeds; write table.md/.csv/.png "
                                    "beside the published Table 1. Finished runs are reused.")
    q.add_argument("--scale", choices=("smoke", "cpu", "paper"), default="cpu",
                   help="sizes and steps (protocol unchanged): smoke = seconds (tests), cpu = "
                        "under 2 h on 2 cores with --workers 2, paper = the paper's model and "
                        "25k steps (GPU)")
    q.add_argument("--out", metavar="DIR", default=None,
                   help="output folder (default runs/tra-flipflop-<scale>)")
    q.add_argument("--workers", type=int_at_least(1), default=1, metavar="N",
                   help="parallel worker processes (default 1: one run after another)")
    q.add_argument("--seeds", type=int_at_least(0), nargs="+", default=None, metavar="S",
                   help="seeds (init and data order; default: the scale's, e.g. 0 1 2 for cpu)")
    q.add_argument("--models", nargs="+", default=None, metavar="NAME",
                   help="subset of Table 1 columns (default all: NoPE APE REL RoPE Label FoT "
                        "Diff CoPE TRA)")
    q.add_argument("--rel", choices=("t5", "xl"), default="t5",
                   help="REL column: t5 bucketed bias (default) or Transformer-XL relative")
    q.add_argument("--heatmaps", action="store_true",
                   help="also train the Appendix A pair (2-layer 1-head TRA and FoT) and plot "
                        "their final-layer attention on an OOD-sparse sequence")
    q.add_argument("--heatmap-seeds", type=int_at_least(0), nargs="+", default=[0], metavar="S",
                   help="with --heatmaps: train the pair once per seed (default: 0); writes "
                        "pair.png for seed 0, pair-sK.png for seed K, and heatmaps/summary.md "
                        "with each model's accuracy")
    q.add_argument("--backend", choices=("local", "ray"), default="local",
                   help="local processes (default) or Ray tasks (needs: pip install ray)")
    q.add_argument("--threads", type=int_at_least(0), default=None, metavar="N",
                   help="torch threads per worker (default: cores // workers when workers > 1)")
    q.add_argument("--device", default=None,
                   help="torch device for training (default: cuda at paper scale if present, else cpu)")
    q.add_argument("--estimate", action="store_true",
                   help="time a few steps per model on this machine and print the estimated "
                        "total instead of running")
    q.set_defaults(fn=cmd_reproduce_tra)

    q = rsub.add_parser("randomized-pe", help="Ruoss et al. 2023 Tables 1/4 and Fig. 4: "
                        "standard vs randomized positional encodings on the Chomsky tasks",
                        description="Train the paper's encoder on tasks x encodings x seeds x "
                                    "learning rates, evaluate over test lengths N+1..M, and write "
                                    "table1.md/.csv, table4.md, curves/<task>.png (plus the L and "
                                    "sorting ablations if asked) beside the published numbers. "
                                    "Finished runs are reused.")
    q.add_argument("--scale", choices=("smoke", "cpu", "paper"), default="cpu",
                   help="sizes and steps (protocol unchanged): smoke = seconds (tests), cpu = "
                        "5 tasks x 4 encodings x 2 seeds, 1.5k steps, strided test lengths, meant "
                        "for <= 3 h on 2 cores with --workers 2 (check with --estimate), paper = "
                        "15 tasks x 11 encodings x 10 seeds x 3 lrs, 2M steps (GPU)")
    q.add_argument("--out", metavar="DIR", default=None,
                   help="output folder (default runs/randomized-pe-<scale>, with -evalid "
                        "appended under --eval-identity)")
    q.add_argument("--workers", type=int_at_least(1), default=1, metavar="N",
                   help="parallel worker processes (default 1: one run after another)")
    q.add_argument("--tasks", nargs="+", default=None, metavar="TASK",
                   help="subset of tasks (default: the scale's; e.g. even_pairs reverse_string)")
    q.add_argument("--schemes", nargs="+", default=None, metavar="ENC",
                   help="subset of encodings: none sincos relative alibi rope learned "
                        "rand_sincos rand_relative rand_alibi rand_rope rand_learned "
                        "(default: the scale's)")
    q.add_argument("--seeds", type=int_at_least(0), nargs="+", default=None, metavar="S",
                   help="seeds (init and data order; default: the scale's, e.g. 0 1 for cpu)")
    q.add_argument("--lrs", type=positive_float, nargs="+", default=None, metavar="LR",
                   help="learning rates (default: the scale's; paper 1e-4 3e-4 5e-4)")
    ev = q.add_mutually_exclusive_group()
    ev.add_argument("--eval-randomized", dest="eval_randomized", action="store_true",
                    default=True, help="randomized encodings keep drawing fresh sorted "
                                       "positions at evaluation, as the paper (default)")
    ev.add_argument("--eval-identity", dest="eval_randomized", action="store_false",
                    help="randomized encodings use positions 0..T-1 at evaluation instead")
    q.add_argument("--ablation-L", dest="ablation_L", type=int_at_least(1), nargs="*", default=None,
                   metavar="L", help="also train randomized relative at these maximum positions "
                                     "L on reverse_string and missing_duplicate_string (Fig. 3); "
                                     "no values = the scale's (paper: 1024 2048 4096 8192); L "
                                     "must hold the longest test input")
    q.add_argument("--ablation-unsorted", action="store_true",
                   help="also train randomized sin/cos without sorting the positions (Table 3)")
    q.add_argument("--backend", choices=("local", "ray"), default="local",
                   help="local processes (default) or Ray tasks (needs: pip install ray)")
    q.add_argument("--threads", type=int_at_least(0), default=None, metavar="N",
                   help="torch threads per worker (default: cores // workers when workers > 1)")
    q.add_argument("--device", default=None,
                   help="torch device for training (default: cuda at paper scale if present, "
                        "else cpu)")
    q.add_argument("--estimate", action="store_true",
                   help="time a few training steps and one longest-length evaluation batch per "
                        "task x encoding on this machine and print the estimated total wall "
                        "time of the grid instead of running")
    q.set_defaults(fn=cmd_reproduce_rpe)

    p = sub.add_parser("plot", help="plots of finished runs (attention heatmaps)",
                       description="Plots made from run directories; nothing is trained.")
    psub = p.add_subparsers(dest="plot", required=True, metavar="PLOT",
                            help="which plot (attention)")
    q = psub.add_parser("attention", help="attention heatmap of a trained run on one sequence",
                        description="Render one layer/head's attention weights of a trained run "
                                    "on one evaluation sequence; zero weights are black.")
    q.add_argument("run_dir", metavar="RUN_DIR", help="a run directory made by lengen train")
    q.add_argument("--split", default="sparse", help="evaluation split of the sequence (default sparse)")
    q.add_argument("--layer", type=int, default=-1, help="layer index (default -1: the last)")
    q.add_argument("--head", type=int, default=0, help="head index (default 0)")
    q.add_argument("--index", type=int_at_least(0), default=0, metavar="N",
                   help="which sequence of the run's evaluation set (default 0)")
    q.add_argument("--first-error", action="store_true",
                   help="plot the first evaluation sequence the model gets wrong instead")
    q.add_argument("--seed", type=int_at_least(0), default=None, metavar="S",
                   help="evaluation data seed (default: the run's eval.seed)")
    q.add_argument("--cmap", default="magma", help="Matplotlib colormap (default magma)")
    q.add_argument("--out", metavar="FILE", default=None,
                   help="PNG path (default RUN_DIR/attention-<split>-<index>-L<layer>H<head>.png)")
    q.set_defaults(fn=cmd_plot_attention)

    p = sub.add_parser("analyze", help="analyses that train nothing (e.g. idealized attention scores)",
                       description="Analyses computed from formulas or finished runs.")
    asub = p.add_subparsers(dest="analysis", required=True, metavar="ANALYSIS",
                            help=f"which analysis ({', '.join(ANALYSES)})")
    for name, module in ANALYSES.items():
        mod = importlib.import_module(module)
        doc = (mod.__doc__ or name).strip()
        q = asub.add_parser(name, help=doc.splitlines()[0], description=doc.split("\n\n")[0])
        mod.add_arguments(q)
        q.set_defaults(fn=mod.run)

    p = sub.add_parser("list", help="list registered schemes, attention kinds, samplers and tasks")
    p.set_defaults(fn=cmd_list)
    return ap


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
    except SystemExit as e:                  # argparse printed usage and the error
        return e.code if isinstance(e.code, int) else 2
    if extra:
        if getattr(args, "command", None) == "train" and all(map(looks_like_override, extra)):
            args.overrides += extra          # overrides after a flag: accepted in any order
        else:
            hint = ("; overrides look like key.path=value" if any("=" in x for x in extra)
                    else "; see lengen --help")
            print(f"lengen: error: unrecognized arguments: {' '.join(extra)}{hint}",
                  file=sys.stderr)
            return 2
    try:
        code = args.fn(args)
        sys.stdout.flush()
        return code
    except KeyboardInterrupt:
        print("lengen: interrupted; the last checkpoint is kept, rerun the same command to resume",
              file=sys.stderr)
        return 130
    except BrokenPipeError:
        silence_stdout()
        return 1
    except Exception as e:  # noqa: BLE001 - every error ends as one paragraph on stderr
        if debug:
            import traceback

            traceback.print_exc()
        if is_user_error(e):
            print(f"lengen: error: {message(e)}", file=sys.stderr)
            return 2
        print(f"lengen: error: {type(e).__name__}: {message(e)} (unexpected; rerun with --debug "
              f"for the traceback and report it if it looks like a bug)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["main", "build_parser"]
