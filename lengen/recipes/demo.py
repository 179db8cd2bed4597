"""``lengen demo``: the CPU-sized main job.

Trains TRA and three baselines (NoPE, RoPE, FoT) on flip-flop language modelling with the TRA
paper's protocol shrunk to fit a 2-core CPU in about a quarter of an hour: same task definition,
splits and metric (whole-sequence accuracy on IID p_i=0.8, sparse 0.98, dense 0.1), a Llama-style
backbone (SwiGLU, RMSNorm pre-norm, MLP 2x), cosine decay; smaller model, shorter sequences and
fewer steps than the paper (see DEMO below). Prints the table and writes ``table.md``,
``table.csv`` and ``rows.json`` to the output folder. Finished models are skipped on rerun and an
interrupted one resumes from its checkpoint.
"""
from __future__ import annotations

import json
import os
import time

from lengen.config import resolve
from lengen.fileio import make_output_dir, save_json_atomic, write_csv_atomic, write_text_atomic
from lengen.registry import lookup
from lengen.train import train

# One place for the demo's size; the protocol (task, splits, metric) is the paper's.
DEMO = {
    "n_pairs": 64,            # 128 tokens per sequence (paper: 256 pairs = 512 tokens)
    "d_model": 64, "n_layers": 2, "n_heads": 4,
    "steps": 1500, "batch_size": 32, "lr": 1e-3, "warmup_steps": 50,
    "eval_sequences": 1000,
}

# name -> (attention kind, positional scheme)
DEMO_MODELS = {
    "nope": ("softmax", "nope"),
    "rope": ("softmax", "rope"),
    "fot": ("fot", "nope"),
    "tra": ("tra", "nope"),
}
SPLIT_ORDER = ("iid", "sparse", "dense")


def demo_config(name: str, steps: int | None = None, eval_sequences: int | None = None,
                threads: int = 0):
    attention, posenc = lookup(DEMO_MODELS, name, "demo model")
    d = DEMO
    return resolve({
        "name": f"demo-{name}",
        "model": {"attention": attention, "posenc": posenc, "d_model": d["d_model"],
                  "n_layers": d["n_layers"], "n_heads": d["n_heads"]},
        "task": {"name": "flipflop", "kwargs": {"n_pairs": d["n_pairs"]}},
        "train": {"steps": steps or d["steps"], "batch_size": d["batch_size"], "lr": d["lr"],
                  "warmup_steps": d["warmup_steps"], "seed": 0, "data_seed": 0,
                  "ckpt_every": 100, "log_every": 10, "threads": threads},
        "eval": {"sequences": eval_sequences or d["eval_sequences"], "batch_size": 250},
    })


def format_table(rows: list[dict], models: list[str], metric: str = "seq_acc") -> str:
    """Markdown table: rows = splits, columns = models, values in percent."""
    val = {(r["run"], r["split"]): r["value"] for r in rows if r["metric"] == metric}
    head = "| split | " + " | ".join(models) + " |"
    sep = "|---|" + "---|" * len(models)
    lines = [head, sep]
    for split in SPLIT_ORDER:
        cells = [f"{100 * val[(f'demo-{m}', split)]:.1f}" if (f"demo-{m}", split) in val else "-"
                 for m in models]
        lines.append(f"| {split} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run_demo(out_dir: str = "runs/demo", steps: int | None = None, models=None,
             eval_sequences: int | None = None, threads: int = 0) -> list[dict]:
    models = list(models or DEMO_MODELS)
    cfgs = {m: demo_config(m, steps, eval_sequences, threads) for m in models}  # validate all first
    make_output_dir(out_dir)
    rows, times = [], {}
    t_all = time.time()
    for i, (m, cfg) in enumerate(cfgs.items(), 1):
        run_dir = os.path.join(out_dir, m)
        done = os.path.join(run_dir, "eval.json")
        which = f"model {i} of {len(cfgs)} ({m})"     # one progress bar per model: say which
        if os.path.exists(done):
            print(f"{which}: already trained, reusing {done}")
            with open(done) as f:
                rows += json.load(f)
            continue
        print(f"{which}: training in {run_dir}", flush=True)
        t0 = time.time()
        _, _, r = train(cfg, run_dir)
        times[m] = time.time() - t0
        rows += r
    total = time.time() - t_all
    caption = (f"Flip-flop whole-sequence accuracy (%), {DEMO['n_pairs']} pairs "
               f"({2 * DEMO['n_pairs']} tokens), {cfgs[models[0]].config.eval.sequences} sequences per split; "
               f"{DEMO['n_layers']} layers, d_model {DEMO['d_model']}, {DEMO['n_heads']} heads, "
               f"{cfgs[models[0]].config.train.steps} steps x batch {DEMO['batch_size']}, seed 0. "
               f"Wall time {total / 60:.1f} min.")
    table = format_table(rows, models)
    per_read = format_table(rows, models, metric="token_acc")
    text = f"{caption}\n\n{table}\n\nPer-read accuracy (%):\n\n{per_read}\n"
    print("\n" + text)
    write_text_atomic(text, os.path.join(out_dir, "table.md"))
    write_csv_atomic(rows, os.path.join(out_dir, "table.csv"))
    save_json_atomic(rows, os.path.join(out_dir, "rows.json"))
    save_json_atomic({"seconds_per_model": times, "total_seconds": total},
                     os.path.join(out_dir, "timing.json"))
    print("wrote " + ", ".join(os.path.join(out_dir, n) for n in ("table.md", "table.csv",
                                                                    "rows.json", "timing.json")))
    return rows
