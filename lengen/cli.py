"""The ``lengen`` command: a thin layer that parses arguments and calls the library.

    lengen [--debug] COMMAND ...
    lengen train [--config FILE] [--run-dir DIR] [--no-resume | --fresh] [key.path=value ...]
    torchrun --nproc_per_node N -m lengen train --run-dir DIR ...     (data-parallel, DDP)
    lengen eval RUN_DIR [--splits iid sparse dense] [--sequences N]
    lengen eval --hf CHECKPOINT_DIR --task NAME --out DIR [--task-kwargs JSON]
                [--rope-scaling '{rope_type: linear, factor: 2}' | --positions SAMPLER]
    lengen generate RUN_DIR [--split len=K | --prompt 'tokens ...'] [--n N]
    lengen demo [--out DIR] [--steps N]
    lengen reproduce RECIPE [--scale smoke|cpu|paper] [--out DIR] [--workers N] [--estimate] ...
                                  (RECIPE: a key of lengen.recipes.RECIPES, e.g. tra-flipflop)
    lengen plot attention RUN_DIR [--split sparse] [--layer -1] [--head 0] [--out FILE] [--index N]
    lengen plot activations RUN_DIR [RUN_DIR ...] [--lengths 40 150] [--n 30] [--out FILE]
    lengen analyze ANALYSIS [...]      (ANALYSIS: a key of lengen.analysis.ANALYSES, e.g. idealized)
    lengen list
    lengen sweep [--config FILE] key=a,b ... [--seeds 0 1 2] [--workers N] [--backend ray]
    lengen bench --variant OVERRIDES [--seeds ...] [--quick] [--backend ray] [--compare A B]
                                  [--fit-search]
    lengen bench --export DEST [--out BENCH_FOLDER]

Every error a user can fix is printed as one paragraph (what is wrong, where, how to fix it) with
exit status 2 and no traceback; ``--debug`` (anywhere on the line) shows the traceback too.
Validation lives in the library, so ``lengen.resolve`` / ``lengen.train`` raise the same errors.
"""
from __future__ import annotations

import argparse
import csv
import importlib
import re
import json
import os
import sys
import shutil
import textwrap
import time
import traceback

import torch
from tqdm import tqdm

from lengen.cliutil import (int_at_least, is_user_error, json_object, lengen_warnings,
                            looks_like_override, message, not_an_override, silence_stdout,
                            yaml_mapping)
from lengen.analysis import ANALYSES
from lengen.attention import ATTENTION_POINT
from lengen.config import load_config_file, resolve
from lengen.consent import (ALLOW_IMPORTS_FLAG, TRUST_REMOTE_CODE_FLAG, allow_plugin_imports,
                            allow_remote_code)
from lengen.errors import (ConfigError, ExportError, LengenError, is_out_of_memory,
                           out_of_memory_message)
from lengen.fileio import disk_full_message, is_disk_full
from lengen.posenc import POSENC_POINT
from lengen.recipes import RECIPES
from lengen.registry import describe
from lengen.rundir.layout import check_run_dir
from lengen.samplers import SAMPLER_POINT
from lengen.tasks import TASK_POINT
from lengen.train import train
from lengen.train.distributed import env_world_size

def _add_common_train(p):
    p.add_argument("--config", metavar="FILE", type=not_an_override("--config"),
                   help="YAML or JSON experiment config "
                   "(sections: model, task, train, eval); overrides are applied on top")
    p.add_argument("overrides", nargs="*", metavar="key.path=value",
                   help="dotted overrides, e.g. model.attention=tra train.steps=500 "
                        "model.attention_kwargs.qk_norm=false (before or after the flags)")


def _add_threads(p):
    p.add_argument("--threads", type=int_at_least(0), default=0, metavar="N",
                   help="torch CPU threads (default 0: lengen's choice, 1 for models of d_model "
                        "<= 256 on CPU; see lengen/threads.py)")


def cmd_train(args) -> int:
    resolved = resolve(load_config_file(args.config) if args.config else {}, args.overrides)
    name = resolved.config.name
    # an empty --run-dir is refused by train(), never replaced by the default
    run_dir = (args.run_dir if args.run_dir is not None
               else os.path.join("runs", name or time.strftime("run-%Y%m%d-%H%M%S")))
    check_run_dir(run_dir, "--run-dir")
    if env_world_size() > 1 and not args.run_dir and not name:
        # under torchrun every process must name the same directory (a time stamp may differ)
        raise ConfigError("data-parallel training (torchrun) needs --run-dir DIR (or a config "
                          "'name'): the default directory name holds the start time, which the "
                          "processes would not share")
    if _rank() == 0:
        print(f"run directory: {run_dir}")
    _, _, rows = train(resolved, run_dir, resume=not args.no_resume, fresh=args.fresh)
    if rows:
        print_rows(rows)
    return 0


def _rank() -> int:
    """This process's rank in a torchrun job (0 outside one)."""
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def cmd_eval(args) -> int:
    # start-up: only this command needs it
    from lengen.runs import HF_EVAL_STEM, evaluate_hf, evaluate_run

    hf_only = [f for f, v in (("--task", args.task), ("--task-kwargs", args.task_kwargs),
                              ("--rope-scaling", args.rope_scaling)) if v is not None]
    if args.hf is not None:
        if args.run_dir is not None:
            raise ConfigError(f"give a RUN_DIR or --hf PATH, not both (got {args.run_dir} and "
                              f"--hf {args.hf})")
        if args.task is None or args.out is None:
            raise ConfigError("lengen eval --hf PATH needs --task NAME (a lengen task, e.g. copy "
                              "or text) and --out DIR (a folder for eval.json / .csv / .png)")
        rows = evaluate_hf(args.hf, args.task, args.out, task_kwargs=args.task_kwargs,
                           splits=args.splits, sequences=args.sequences,
                           batch_size=args.batch_size, seed=args.seed, device=args.device,
                           positions=args.positions, positions_kwargs=args.positions_kwargs,
                           rope_scaling=args.rope_scaling, progress=True, threads=args.threads)
        print_rows(rows)
        stem = os.path.join(args.out, HF_EVAL_STEM)
        print(f"wrote {stem}.json and .csv" + (" and .png" if os.path.exists(f"{stem}.png")
                                                 else ""))
        return 0
    if args.run_dir is None:
        raise ConfigError("lengen eval needs a RUN_DIR (a run made by lengen train) or --hf PATH "
                          "(a Hugging Face checkpoint directory)")
    if hf_only:
        raise ConfigError(f"{', '.join(hf_only)} apply to --hf PATH only (a run directory "
                          f"evaluates its own task and model)")
    args.out = "reeval" if args.out is None else args.out
    rows = evaluate_run(args.run_dir, splits=args.splits, sequences=args.sequences,
                        batch_size=args.batch_size, seed=args.seed, device=args.device,
                        out=args.out, progress=True, positions=args.positions,
                        positions_kwargs=args.positions_kwargs, threads=args.threads)
    print_rows(rows)
    print(f"wrote {os.path.join(args.run_dir, args.out)}.json and .csv (the run's training-time "
          f"eval.json is kept)")
    png = os.path.join(args.run_dir, f"{args.out}.png")
    if os.path.exists(png):                 # a sweep over >= 2 lengths: accuracy vs length
        print(f"wrote {png}")
    return 0


def cmd_generate(args) -> int:
    from lengen.eval.generation import run_generate  # start-up: only this command needs it

    print(run_generate(args.run_dir, split=args.split, prompt=args.prompt, n=args.n,
                       seed=args.seed, device=args.device, threads=args.threads))
    return 0


def cmd_export(args) -> int:
    try:
        import transformers  # noqa: F401 - optional dependency
    except ImportError:
        raise ExportError('lengen export needs Hugging Face transformers: pip install '
                          '"lengen[hf]"') from None
    from lengen.hf.export import export_run  # start-up: only this command needs it

    out = export_run(args.run_dir, args.out, to=args.to)
    load = ("import lengen.hf; AutoModelForCausalLM.from_pretrained" if args.to == "hf" else
            "AutoModelForCausalLM.from_pretrained")
    print(f"wrote {out} (config.json + model.safetensors; load with {load}({out!r}))")
    return 0


def cmd_demo(args) -> int:
    from lengen.recipes.demo import run_demo  # start-up: only this command needs it

    run_demo(out_dir=args.out, steps=args.steps, models=args.models, eval_sequences=args.sequences,
             threads=args.threads)
    return 0


def cmd_plot_activations(args) -> int:
    from lengen.analysis.activations import plot_activations  # start-up: only this command needs it

    out, results = plot_activations(args.run_dirs, tuple(args.lengths), n_sequences=args.n,
                                    seed=args.seed, positions=args.positions, out=args.out)
    for r in results:
        acc = ", ".join(f"len {n}: {100 * a:.1f}%" for n, a in r["accuracy"].items())
        shift = "; ".join(f"{'emb' if i == 0 else f'L{i}'} {sh[r['lengths'][-1]]['shift']:.2f}"
                          for i, sh in enumerate(r["shift"]))
        print(f"{r['run']}: accuracy {acc}; shift of the longest length: {shift}")
    print(f"wrote {out}")
    return 0


def cmd_plot_attention(args) -> int:
    from lengen.analysis.heatmap import plot_attention  # start-up: only this command needs it

    out = plot_attention(args.run_dir, split=args.split, layer=args.layer, head=args.head,
                         out=args.out, seed=args.seed, index=args.index,
                         first_error=args.first_error, cmap=args.cmap)
    print(f"wrote {out}")
    return 0




def cmd_list(args) -> int:
    points = (("positional schemes", POSENC_POINT), ("attention kinds", ATTENTION_POINT),
              ("position samplers", SAMPLER_POINT), ("tasks", TASK_POINT))
    plugins = {point.group: point.plugins() for _, point in points}
    width = max(len(name) for _, p in points for name in [*p.registry, *plugins[p.group]])
    # whole first sentences, wrapped at words to the terminal (continuations under the text)
    columns = max(shutil.get_terminal_size((100, 24)).columns, width + 40)
    indent = " " * (width + 4)

    def line(name, text):
        print(textwrap.fill(text, columns, initial_indent=f"  {name:<{width}}  ",
                            subsequent_indent=indent, break_long_words=False,
                            break_on_hyphens=False) if text else f"  {name}")

    for title, point in points:
        print(f"{title} ({point.key}):")
        for name, obj in point.registry.items():
            line(name, describe(obj, point.registry, width=None))
        for name, path in sorted(plugins[point.group].items()):
            try:        # a plugin's line is its own docstring's first sentence
                text = describe(point.get(name), width=None)
            except LengenError as e:
                text = f"cannot be loaded: {e}"
            line(name, f"[plugin {path}] {text}")
    print("Any of these keys also takes an import path package.module:Name to your own class; "
          "installed packages add short names through the entry-point groups lengen.posencs, "
          "lengen.attentions, lengen.samplers and lengen.tasks (see CONTRIBUTING.md).")
    return 0


def cmd_build_kernels(args) -> int:
    from lengen.ops import ckernels  # start-up: only this command needs it

    if not ckernels.enabled():
        raise ConfigError("LENGEN_C_KERNELS is off in this environment: the kernels would not "
                          "be used; unset it (or set LENGEN_C_KERNELS=1) to build them")
    try:
        cc = ckernels.find_compiler()
    except OSError as e:
        print(f"lengen: no C kernels: {e}; lengen runs the PyTorch path (same results, slower)",
              file=sys.stderr)
        return 1
    print(f"building {len(ckernels.sources())} C kernels with {' '.join(cc)} into "
          f"{ckernels.cache_dir()}:", flush=True)
    results = ckernels.build_all(log=lambda line: print(line, flush=True))
    return 0 if all(lib is not None for _, lib, _ in results) else 1


def cmd_bench(args) -> int:
    from lengen.bench.battery import default_out  # start-up: only this command needs it
    from lengen.bench.run import (baseline_variants, estimate_bench, load_variants,
                                  parse_variant, run_bench)  # start-up: only this command needs it
    from lengen.bench.scorecard import compare_cards

    if args.export:
        from lengen.bench.export import export_card  # start-up: this command only

        given = (("--variant", args.variant), ("--variants", args.variants),
                 ("--baselines-only", args.baselines_only is not None),
                 ("--fit-search", args.fit_search), ("--compare", args.compare),
                 ("--estimate", args.estimate))
        other = [flag for flag, used in given if used]
        if other:
            raise ConfigError(f"--export copies a finished bench (--out) and trains nothing; "
                              f"it takes no {', '.join(other)}")
        export_card(args.out or default_out(args.scale), args.export)
        return 0
    if args.compare:
        out = args.out or os.path.join("runs", "bench-compare")
        compare_cards(args.compare[0], args.compare[1], out)
        print(open(os.path.join(out, "scorecard.md"), encoding="utf-8").read())
        return 0
    variants = [parse_variant(v) for v in args.variant]
    if args.variants:
        variants += load_variants(args.variants)
    baselines = None if args.baselines == "none" else args.baselines
    if args.baselines_only is not None and not variants and args.baselines == "default":
        baselines = None              # this scorecard *is* the baselines: none to read beside it
    if args.baselines_only is not None:
        variants += baseline_variants(args.baselines_only)
    if not variants:
        raise ConfigError("lengen bench needs at least one variant: --variant 'model.posenc="
                          "rope' (model.* overrides), --variants FILE, or --baselines-only")
    protocol = "quick" if args.quick else "full"
    if args.fit_search:
        return _bench_fit_search(args, variants, baselines)
    if args.estimate:
        estimate_bench(variants, args.scale, workers=args.workers, cells=args.cells,
                       threads=args.threads, seeds=args.seeds, protocol=protocol,
                       out=args.out or default_out(args.scale))
        return 0
    rows = run_bench(variants, args.scale, args.out, workers=args.workers, cells=args.cells,
                     threads=args.threads, baselines=baselines, seeds=args.seeds,
                     protocol=protocol, backend=args.backend, device=args.device,
                     runs_per_gpu=args.runs_per_gpu, ray_address=args.ray_address)
    return 0 if all(r["status"] != "failed" for r in rows) else 1


def _bench_fit_search(args, variants, baselines) -> int:
    from lengen.bench.fit_search import estimate_fit_search, run_fit_search
    from lengen.bench.run import BASELINE_GROUPS, parse_variant  # start-up: this command only

    if args.quick or args.seeds is not None:
        raise ConfigError("--fit-search runs the pre-registered ladder on the protocol's first "
                          "seed of the runs in --out; --quick and --seeds do not apply")
    # named on the command line (not through a group): must have runs in --out
    required = [parse_variant(v)[0] for v in args.variant] + [
        n for n in (args.baselines_only or []) if n not in BASELINE_GROUPS]
    if args.estimate:
        estimate_fit_search(variants, args.scale, args.out, cells=args.cells,
                            workers=args.workers, threads=args.threads, required=required)
        return 0
    ray_options = None
    if args.backend == "ray":
        gpus = (1.0 / args.runs_per_gpu) if args.device and args.device.startswith("cuda") else 0
        ray_options = {"address": args.ray_address, "num_cpus": 1, "num_gpus": gpus}
    rows = run_fit_search(variants, args.scale, args.out, cells=args.cells,
                          workers=args.workers, threads=args.threads, baselines=baselines,
                          required=required, backend=args.backend, device=args.device,
                          ray_options=ray_options)
    return 0 if all(r["status"] != "failed" for r in rows) else 1


def cmd_sweep(args) -> int:
    from lengen.bench.seeds import run_seed_sweep  # start-up: only this command needs it

    base = load_config_file(args.config) if args.config else {}
    ray_options = {"address": args.ray_address} if args.backend == "ray" else None
    summary = run_seed_sweep(base, args.overrides, args.seeds, args.out, workers=args.workers,
                             backend=args.backend, threads=args.threads, metric=args.metric,
                             fit_threshold=args.fit_threshold, fit_splits=args.fit_splits,
                             ray_options=ray_options)
    print(summary["markdown"])
    print(f"wrote {os.path.join(args.out, 'table.md')} and table.csv")
    return 0 if all(a["failed"] == 0 for a in summary["arms"]) else 1


def cmd_check(args) -> int:
    from lengen.contracts import check  # start-up: only this command needs it

    torch.set_num_threads(1)                     # tiny models: one thread is fastest
    rows = check(args.name, args.kind, progress=lambda steps: tqdm(
        steps, desc=f"check {args.name}", disable=not sys.stderr.isatty(), leave=False))
    if args.format == "json":
        print(json.dumps(rows, indent=1))
    elif args.format == "csv":
        w = csv.DictWriter(sys.stdout, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    else:
        from lengen.analysis.tables import markdown_table  # start-up: only this command needs it

        print(markdown_table([["contract", "with", "status", "reason"]]
                             + [[r["contract"], r["with"] or "-", r["status"], r["reason"] or ""]
                                for r in rows], align="llll"))
    counts = {s: sum(r["status"] == s for r in rows) for s in ("pass", "fail", "skip")}
    print(f"{args.name} ({rows[0]['kind']}): {counts['pass']} passed, {counts['fail']} failed, "
          f"{counts['skip']} skipped", file=sys.stderr)
    return 1 if counts["fail"] else 0


#: metrics that are fractions of sequences or tokens: printed as % (as the demo, the plots and
#: the reproductions print them); the rows keep fractions
PERCENT_METRICS = ("seq_acc", "token_acc", "glitch_rate", "seq_acc_generated")


def print_rows(rows) -> None:
    table = {}
    for r in rows:
        table.setdefault(r["split"], {})[r["metric"]] = r["value"]
    metrics = ["seq_acc", "token_acc", "glitch_rate", "nll"]
    present = list(dict.fromkeys(r["metric"] for r in rows))
    if not set(present) <= set(metrics):        # e.g. language modelling: ppl, nll
        metrics = present
    pct = [m in PERCENT_METRICS for m in metrics]
    print(f"{'split':<10}" + "".join(f"{m + ' %' if p else m:>14}" for m, p in zip(metrics, pct)))
    for split, vals in table.items():
        cells = []
        for m, p in zip(metrics, pct):
            v = vals.get(m, float("nan"))
            cells.append(f"{100 * v:>14.1f}" if p else f"{v:>14.4f}")
        print(f"{split:<10}" + "".join(cells))


def plain_help(text: str) -> str:
    """A docstring as terminal help: Sphinx roles and double backticks dropped (``:mod:`x``` and
    ````x```` -> ``x``), issue references ("(issue 12)", "issue 27 item 3") removed."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", text)
    text = re.sub(r"``([^`]+)``", r"\1", text)
    text = re.sub(r"\s*\((?:issues?|stop) \d+[^()]*\)", "", text)
    return re.sub(r"[ ,;]*\bissues? \d+(?: items? [\d, -]+)?", "", text)


def add_registry_commands(parser, registry: dict, *, dest: str, metavar: str,
                          load=None) -> None:
    """One subcommand per registry entry (name -> module path). The module provides
    ``add_arguments(parser)`` and ``run(args) -> int``; its docstring gives the help (first paragraph)
    and the description (its first two paragraphs). So a new recipe or analysis never touches this file.
    ``load``: the names whose modules are imported (default all); the others get a bare
    subcommand, so a command line that runs one recipe imports only that recipe."""
    sub = parser.add_subparsers(dest=dest, required=True, metavar=metavar,
                                help=f"one of: {', '.join(registry)}")
    for name, module in registry.items():
        if load is not None and name not in load:
            sub.add_parser(name)
            continue
        mod = importlib.import_module(module)
        doc = plain_help(mod.__doc__ or name).strip()
        first = " ".join(doc.split("\n\n")[0].split())
        q = sub.add_parser(name, help=first,
                           description="\n\n".join(textwrap.fill(" ".join(par.split()), 90)
                                                    for par in doc.split("\n\n")[:2]),
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_arguments(q)
        q.set_defaults(fn=mod.run)


def _registry_to_load(argv, command: str, registry: dict):
    """Which entries of a subcommand registry a command line needs: all of them for ``lengen
    COMMAND`` alone (its --help lists them with their help), the named one for ``lengen COMMAND
    NAME ...``, none for another command. ``argv`` None (a caller building the whole parser):
    all."""
    if argv is None:
        return None
    words = [a for a in argv if not a.startswith("-")]
    if not words or words[0] != command:
        return ()
    return (words[1],) if len(words) > 1 and words[1] in registry else None


def build_parser(argv=None) -> argparse.ArgumentParser:
    """The ``lengen`` argument parser. Given the command line ``argv``, it imports only the recipe
    or analysis that line runs (every command pays for importing every recipe otherwise)."""
    ap = argparse.ArgumentParser(prog="lengen", description="Length generalization in transformers: "
                                 "train short, test long/sparse/dense, compare positional schemes.")
    ap.add_argument(ALLOW_IMPORTS_FLAG, action="store_true",
                    help="import the plugin paths a run directory's config.json names (anywhere "
                         "on the line; default: only installed plugins, see docs/promises.md)")
    ap.add_argument(TRUST_REMOTE_CODE_FLAG, action="store_true",
                    help="let transformers run Python code shipped in a --hf directory "
                         "(default: refused)")
    ap.add_argument("--debug", action="store_true",
                    help="show the full traceback of an error (allowed anywhere on the line)")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("train", help="train (or resume) one run", description="Train one model; "
                       "resumes from the run directory's last checkpoint if there is one. "
                       "Launched by torchrun (torchrun --nproc_per_node N -m lengen train "
                       "--run-dir DIR ...) it trains data-parallel: train.batch_size is the "
                       "global batch, rank 0 writes the run directory.")
    _add_common_train(p)
    p.add_argument("--run-dir", metavar="DIR", type=not_an_override("--run-dir"),
                   help="run directory (default runs/<name or time>)")
    resume = p.add_mutually_exclusive_group()
    resume.add_argument("--no-resume", action="store_true",
                        help="start from step 0; refused if the run directory already holds a "
                             "run (see --fresh)")
    resume.add_argument("--fresh", action="store_true",
                        help="move an existing run in the run directory to RUN_DIR/previous/"
                             "<time>/ (nothing is deleted) and start over")
    p.set_defaults(fn=cmd_train)

    p = sub.add_parser("eval", help="evaluate a trained run (or a Hugging Face checkpoint) on "
                                    "named splits",
                       description="Evaluate a run directory's weights; writes rows as JSON and "
                                   "CSV. With --hf PATH --task NAME --out DIR instead: evaluate a "
                                   "local Hugging Face checkpoint (offline) on a lengen task's "
                                   "length sweep or perplexity-vs-length protocol and write "
                                   "DIR/eval.json, .csv and .png.")
    p.add_argument("run_dir", metavar="RUN_DIR", nargs="?",
                   help="a run directory made by lengen train (or give --hf PATH)")
    p.add_argument("--hf", metavar="PATH",
                   help="a Hugging Face checkpoint directory (config.json + weights, read with "
                        "from_pretrained offline: llama, gpt2, or a lengen export) to evaluate "
                        "instead of a run; needs --task and --out")
    p.add_argument("--task", metavar="NAME",
                   help="--hf only: the lengen task to evaluate on (copy, reverse, sort, "
                        "summation, addition, flipflop: exact match per length; text: perplexity "
                        "per length, with the checkpoint's own tokenizer when PATH has one)")
    p.add_argument("--task-kwargs", type=json_object, metavar="JSON",
                   help='--hf only: the task\'s keyword arguments as a JSON object, e.g. '
                        '\'{"corpus": "files", "data_files": {...}, "eval_lengths": [128, 512]}\'')
    p.add_argument("--rope-scaling", type=yaml_mapping, metavar="MAPPING",
                   help="--hf only: transformers' own RoPE scaling applied to the loaded config, "
                        "e.g. '{rope_type: linear, factor: 2}' (rope_type: linear, dynamic, "
                        "yarn, llama3, longrope)")
    p.add_argument("--splits", nargs="+", metavar="SPLIT",
                   help="splits to evaluate (default: the config's or the task's, e.g. iid sparse dense)")
    p.add_argument("--sequences", type=int_at_least(1), metavar="N",
                   help="sequences per split (default: config)")
    p.add_argument("--batch-size", type=int_at_least(1), metavar="N",
                   help="evaluation batch size (default: config; results do not depend on it)")
    p.add_argument("--seed", type=int_at_least(0), metavar="S",
                   help="evaluation data seed (default: config)")
    p.add_argument("--device", default="cpu", help="torch device (default cpu)")
    p.add_argument("--out", default=None, metavar="STEM|DIR",
                   help="output file stem inside RUN_DIR (default reeval -> reeval.json, "
                        "reeval.csv); the run's own files (config, metrics, model, checkpoints, "
                        "and eval.json / eval.csv written by training) are never overwritten. "
                        "With --hf: the output folder (refused if it holds a run)")
    p.add_argument("--positions", metavar="SAMPLER",
                   help="evaluate with this position sampler instead of the run's own (samplers "
                        "hold no weights), e.g. interpolate for a RoPE run; what only the task "
                        "knows (M) is filled in as in training; use another --out. With --hf: a "
                        "lengen sampler applied to the checkpoint (GPT-2: integer ones only)")
    p.add_argument("--positions-kwargs", type=json_object, metavar="JSON",
                   help='keyword arguments of --positions as a JSON object, e.g. \'{"factor": 2}\'')
    _add_threads(p)
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
    p.add_argument("--n", type=int, default=8, metavar="N",
                   help="examples to show (default 8, at most 1000)")
    p.add_argument("--seed", type=int_at_least(0), metavar="S",
                   help="evaluation data seed (default: config)")
    p.add_argument("--device", default="cpu", help="torch device (default cpu)")
    _add_threads(p)
    p.set_defaults(fn=cmd_generate)

    p = sub.add_parser("export", help="write a run as a Hugging Face transformers checkpoint",
                       description="Write a run's weights as a Hugging Face directory "
                                   "(config.json + model.safetensors). --to hf: a "
                                   "LengenForCausalLM, any lengen model, loadable with "
                                   "AutoModelForCausalLM after `import lengen.hf`; --to llama: a "
                                   "stock LlamaForCausalLM (no lengen needed), refused naming "
                                   "what Llama cannot express; --to llama4: a stock "
                                   "Llama4ForCausalLM for RoPE / NoPE layouts (model.layers). "
                                   "Needs lengen[hf].")
    p.add_argument("run_dir", metavar="RUN_DIR", help="a run directory made by lengen train")
    p.add_argument("out", metavar="OUT", help="a new (or empty) directory to write")
    p.add_argument("--to", choices=("hf", "llama", "llama4"), default="hf",
                   help="hf (default): lengen's model in transformers; llama: plain Llama; "
                        "llama4: Llama 4's text model")
    p.set_defaults(fn=cmd_export)

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
    _add_threads(p)
    p.set_defaults(fn=cmd_demo)

    p = sub.add_parser("reproduce", help="reproduce a paper's table (train, evaluate, tabulate)",
                       description="Paper reproductions: sweeps of runs plus the paper's table "
                                   "layout with the published numbers beside ours.")
    add_registry_commands(p, RECIPES, dest="experiment", metavar="EXPERIMENT",
                          load=_registry_to_load(argv, "reproduce", RECIPES))

    p = sub.add_parser("plot", help="plots of finished runs (attention heatmaps, activation PCA)",
                       description="Plots made from run directories; nothing is trained.")
    psub = p.add_subparsers(dest="plot", required=True, metavar="PLOT",
                            help="which plot (attention, activations)")
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
    q = psub.add_parser("activations", help="2D PCA of every layer's activations at the "
                        "training length and beyond (Ruoss et al. Fig. 5)",
                        description="Fit a non-whitened 2D PCA on each layer's activations at the "
                                    "first length and project the other lengths with it; one row "
                                    "per run, one column per layer. Prints each run's accuracy "
                                    "and how far the longer clouds moved.")
    q.add_argument("run_dirs", metavar="RUN_DIR", nargs="+", help="run directories to compare")
    q.add_argument("--lengths", type=int_at_least(1), nargs="+", default=[40, 150], metavar="K",
                   help="input lengths; the first is the fit (training) length (default 40 150)")
    q.add_argument("--n", type=int_at_least(1), default=30, metavar="N",
                   help="sequences per length (default 30, as the paper)")
    q.add_argument("--seed", type=int_at_least(0), default=0, metavar="S",
                   help="data and position seed (default 0)")
    q.add_argument("--positions", choices=("input", "output", "all"), default="input",
                   help="which token positions become points (default input: the task's input "
                        "tokens, as the paper's 30 x 40 points)")
    q.add_argument("--out", metavar="FILE", default=None,
                   help="PNG path (default FIRST_RUN_DIR/activations-pca.png)")
    q.set_defaults(fn=cmd_plot_activations)

    p = sub.add_parser("analyze", help="analyses that train nothing (e.g. idealized attention scores)",
                       description="Analyses computed from formulas or finished runs.")
    add_registry_commands(p, ANALYSES, dest="analysis", metavar="ANALYSIS",
                          load=_registry_to_load(argv, "analyze", ANALYSES))

    p = sub.add_parser("list", help="list registered schemes, attention kinds, samplers and tasks")
    p.set_defaults(fn=cmd_list)

    p = sub.add_parser("build-kernels", help="compile the CPU C kernels into the cache now "
                       "(else the first command that needs them does)",
                       description="Compile every C kernel lengen ships (lengen/ops/**/*.c) "
                       "for this machine into the kernel cache, so no later command waits for "
                       "it. Exit status 1 when there is no C compiler or a kernel fails to build "
                       "(lengen then runs the PyTorch path: same results, slower).")
    p.set_defaults(fn=cmd_build_kernels)

    p = sub.add_parser("bench", help="score model variants on every task family of the four "
                                     "papers beside the built-in baselines",
                       description="Train and evaluate each model variant on the bench battery "
                                   "(flip-flop, four Chomsky tasks, copy, reverse, addition, "
                                   "language modelling; protocols in lengen/bench/battery.py) "
                                   "over several seeds with the same learning-rate grid for "
                                   "every entry (chosen on a held-out in-distribution split) "
                                   "and write runs.csv and the card (scorecard.md/.csv/.json/"
                                   ".png, curves/) beside the committed baselines of the same "
                                   "battery version (docs/bench.md). Finished runs are reused; "
                                   "an interrupted bench resumes.")
    p.add_argument("--variant", action="append", default=[], metavar="OVERRIDES",
                   help="one variant: model.* overrides separated by spaces, optionally with "
                        "name=LABEL, e.g. --variant 'name=slopes model.posenc=mypkg.pe:Slopes' "
                        "(repeat for several)")
    p.add_argument("--variants", metavar="FILE", default=None,
                   help="a YAML list of variants (strings as --variant, or {name, overrides})")
    p.add_argument("--baselines-only", nargs="*", default=None, metavar="NAME",
                   help="run the built-in baselines as the variants (how the committed "
                        "baselines are made): the NAMEs given, or a group: classic (NoPE, "
                        "RoPE, ALiBi, FIRE, 'Rand. RoPE', 'RoPE + warp', TRA, FoT), methods "
                        "(LSTM, p-RoPE, PoPE, Selective, Stick-breaking, Mamba-2, 'Gated "
                        "DeltaNet', PaTH, 'RoPE + SSMax', iRoPE), all (the default: 18 "
                        "variants on 138 cells they can run, classic 64; --estimate times "
                        "them); run them in parts into one --out")
    p.add_argument("--scale", choices=("smoke", "cpu", "paper"), default="cpu",
                   help="smoke = seconds (tests); cpu = 2-layer models on 2 cores (about an "
                        "hour per variant with --workers 2 for the full protocol, less with "
                        "--quick; time it with --estimate); paper = the papers' sizes (GPU)")
    p.add_argument("--cells", nargs="+", default=None, metavar="CELL",
                   help="a subset of the cells (default all: flipflop bucket_sort "
                        "reverse_string even_pairs missing_duplicate copy reverse addition lm)")
    p.add_argument("--out", metavar="DIR", default=None,
                   help="output folder (default runs/bench-<scale>)")
    p.add_argument("--workers", type=int_at_least(1), default=1, metavar="N",
                   help="parallel worker processes (default 1)")
    p.add_argument("--threads", type=int_at_least(0), default=None, metavar="N",
                   help="torch threads per worker (default: cores // workers when workers > 1)")
    p.add_argument("--baselines", default="default", metavar="CSV",
                   help="scorecard.csv of baselines shown beside the variants (default: the "
                        "committed results/bench-<scale>/scorecard.csv; 'none' for none)")
    p.add_argument("--estimate", action="store_true",
                   help="time a few training steps and the evaluation of every variant x cell "
                        "and print the estimated wall time of the whole protocol instead of "
                        "running; runs already finished in --out (which the bench would reuse) "
                        "are counted as done, not timed")
    p.add_argument("--seeds", type=int_at_least(0), nargs="+", default=None, metavar="S",
                   help="training seeds (init and data order) per variant x cell (default "
                        "0..n-1: n = 3 at cpu, 5 at paper, 2 at smoke and with --quick)")
    p.add_argument("--quick", action="store_true",
                   help="the quick protocol: 2 seeds at each cell's default learning rate (no "
                        "grid), every other OOD length; never judged against a full card")
    p.add_argument("--backend", choices=("local", "ray"), default="local",
                   help="local worker processes (default) or one Ray task per run")
    p.add_argument("--device", default=None, metavar="DEV",
                   help="train.device of every run (e.g. cuda; default: lengen's choice)")
    p.add_argument("--runs-per-gpu", type=int_at_least(1), default=4, metavar="N",
                   help="with --backend ray --device cuda: runs sharing one GPU (Ray "
                        "num_gpus = 1/N per run; default 4)")
    p.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="Ray cluster address (default: a running cluster or a local one)")
    p.add_argument("--fit-search", action="store_true",
                   help="instead of the protocol: for each variant x cell of --out's runs.csv "
                        "with no fitted run, rerun its first seed on the pre-registered budget "
                        "ladder (lengen/bench/battery.py FIT_LADDER: lr x0.25 and x4, then "
                        "steps x2, then x4 at the best-validation rate), stopping at the first "
                        "rung that fits; writes fit_search.csv and the card's footnote "
                        "(docs/bench.md). With --baselines-only / --variant (as the bench ran "
                        "them), --cells, --workers, --estimate")
    p.add_argument("--compare", nargs=2, default=None, metavar=("A", "B"),
                   help="no training: lay card A's variants beside card B's (bench output "
                        "folders or runs.csv files) with the same statistics, into --out "
                        "(default runs/bench-compare)")
    p.add_argument("--export", default=None, metavar="DEST",
                   help="no training: copy the finished bench in --out (default "
                        "runs/bench-<scale>) into DEST, a new folder, as the card a contributor "
                        "sends: runs.csv, every run's resolved config, provenance, the card, "
                        "and a README to complete (results/bench-cpu/README.md)")
    p.set_defaults(fn=cmd_bench)

    p = sub.add_parser("sweep", help="compare configs over seeds: fit rate, mean over fitted "
                                     "seeds with a 95%% interval, per split",
                       description="Run every combination of the axes (an override with "
                                   "commas, e.g. model.posenc=rope,alibi) on every seed (init "
                                   "and data order), locally or on Ray, and print one table "
                                   "with the bench card's statistics (lengen/bench/seeds.py).")
    p.add_argument("--config", metavar="FILE", type=not_an_override("--config"),
                   help="base YAML or JSON config")
    p.add_argument("overrides", nargs="*", metavar="key.path=value[,value...]",
                   help="overrides; a value list a,b,c makes an axis")
    p.add_argument("--seeds", type=int_at_least(0), nargs="+", default=[0, 1, 2], metavar="S",
                   help="seeds of every arm (default 0 1 2)")
    p.add_argument("--out", metavar="DIR", default=os.path.join("runs", "sweep"),
                   help="output folder (default runs/sweep)")
    p.add_argument("--workers", type=int_at_least(1), default=1, metavar="N",
                   help="parallel worker processes (default 1)")
    p.add_argument("--backend", choices=("local", "ray"), default="local",
                   help="local worker processes (default) or one Ray task per run")
    p.add_argument("--ray-address", default=None, metavar="ADDR", help="Ray cluster address")
    p.add_argument("--threads", type=int_at_least(0), default=None, metavar="N",
                   help="torch threads per run (default: cores // workers)")
    p.add_argument("--metric", default=None, help="metric of the table (default: the task's "
                                                  "score metric, e.g. seq_acc)")
    p.add_argument("--fit-threshold", type=float, default=0.9, metavar="X",
                   help="a run fitted when its in-distribution mean is >= X (default 0.9)")
    p.add_argument("--fit-splits", nargs="+", default=None, metavar="SPLIT",
                   help="the in-distribution splits (default: iid, or the lengths up to the "
                        "task's max_train_length)")
    p.set_defaults(fn=cmd_sweep)

    p = sub.add_parser("check", help="run the generic contracts on a scheme, attention kind, "
                                     "sampler or task (built-in or plugin)",
                       description="Run the contracts every registry entry must keep (the ones "
                                   "the test suite runs on the built-ins: causality, paths "
                                   "agreeing, [B, T] == [T] positions with gradients in "
                                   "float64, dtype, KV-cache generation, kwargs refused; for a "
                                   "task: determinism, splits, masks, answers) on NAME, and "
                                   "print pass / fail / skip with the reason for each. Exit "
                                   "status 1 if a contract fails.")
    p.add_argument("name", help="a registry name (see `lengen list`), an installed plugin's "
                                "name, or an import path package.module:Name")
    p.add_argument("--kind", choices=("posenc", "attention", "positions", "task"), default=None,
                   help="which registry NAME is in (default: found from the name or the class)")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table",
                   help="output: a Markdown table (default), CSV or JSON rows")
    p.set_defaults(fn=cmd_check)
    return ap


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    # consent to run code named by data (lengen.consent), global flags as --debug
    if ALLOW_IMPORTS_FLAG in argv:
        allow_plugin_imports()
    if TRUST_REMOTE_CODE_FLAG in argv:
        allow_remote_code()
    argv = [a for a in argv if a not in ("--debug", ALLOW_IMPORTS_FLAG, TRUST_REMOTE_CODE_FLAG)]
    parser = build_parser(argv)
    try:
        args, extra = parser.parse_known_args(argv)
    except SystemExit as e:                  # argparse printed usage and the error
        return e.code if isinstance(e.code, int) else 2
    if extra:
        if (getattr(args, "command", None) in ("train", "sweep")
                and all(map(looks_like_override, extra))):
            args.overrides += extra          # overrides after a flag: accepted in any order
        else:
            hint = ("; overrides look like key.path=value" if any("=" in x for x in extra)
                    else "; see lengen --help")
            print(f"lengen: error: unrecognized arguments: {' '.join(extra)}{hint}",
                  file=sys.stderr)
            return 2
    try:
        with lengen_warnings():
            code = args.fn(args)
        sys.stdout.flush()
        return code
    except KeyboardInterrupt:
        if _rank() == 0:
            print("lengen: interrupted; the last checkpoint is kept, rerun the same command to "
                  "resume", file=sys.stderr)
        return 130
    except BrokenPipeError:
        silence_stdout()
        return 1
    except Exception as e:  # noqa: BLE001 - every error ends as one paragraph on stderr
        if debug:
            traceback.print_exc()
        if is_out_of_memory(e):
            print(f"lengen: error: {out_of_memory_message(e)}", file=sys.stderr)
            return 2
        if is_disk_full(e) and not isinstance(e, LengenError):    # those already say so
            where = getattr(e, "filename", None)
            text = (disk_full_message(where) if where else
                    f"disk full: {message(e)}; free some space and rerun the command")
            print(f"lengen: error: {text}", file=sys.stderr)
            return 2
        if is_user_error(e):
            # under torchrun, rank 0 prints the user errors: every rank meets the same config
            # errors, and rank 0 relays the ones only it can see (a held lock, a different run)
            if _rank() == 0:
                print(f"lengen: error: {message(e)}", file=sys.stderr)
            return 2
        where = f" (rank {_rank()})" if os.environ.get("WORLD_SIZE", "1") != "1" else ""
        print(f"lengen: error{where}: {type(e).__name__}: {message(e)} (unexpected; rerun with "
              f"--debug for the traceback and report it if it looks like a bug)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["main", "build_parser"]
