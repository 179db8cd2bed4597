"""Measured check: copy, RoPE vs NoPE, 2 layers d_model 64, train K ~ U(2, 10), eval len=2..20.

Usage: python experiments/copy-rope-nope-cpu/run.py STEPS OUT_DIR (writes OUT_DIR/copy-{rope,nope},
rows.json, copy-rope-vs-nope.png and prints the Markdown table)."""
import json
import sys
import time

import torch

import lengen
from lengen.analysis.length_curves import plot_length_curves

steps, out = int(sys.argv[1]), sys.argv[2]
torch.set_num_threads(1)      # 2 threads on the shared, loaded 2-core machine were 25x slower
rows, times = [], {}
for pe in ("rope", "nope"):
    cfg = lengen.resolve({
        "name": f"copy-{pe}",
        "model": {"posenc": pe, "d_model": 64, "n_layers": 2, "n_heads": 4},
        "task": {"name": "copy", "kwargs": {"max_train_length": 10, "max_eval_length": 20}},
        "train": {"steps": steps, "batch_size": 64, "lr": 3e-3, "warmup_steps": 100,
                  "seed": 0, "data_seed": 0, "progress": False, "log_every": 100, "threads": 1},
        "eval": {"sequences": 200, "batch_size": 100, "seed": 1234},
    })
    t = time.time()
    _, _, r = lengen.train(cfg, f"{out}/copy-{pe}", quiet=True)
    times[pe] = time.time() - t
    rows += r
    print(pe, f"{times[pe]:.0f}s", flush=True)
json.dump({"rows": rows, "times": times}, open(f"{out}/rows.json", "w"))
plot_length_curves(rows, f"{out}/copy-rope-vs-nope.png", metric="seq_acc", by=("pe",),
                   train_range=(2, 10), title="copy: exact match vs length (train K ~ U(2, 10))")
acc = {(r["pe"], r["split"]): r["value"] for r in rows if r["metric"] == "seq_acc"}
tok = {(r["pe"], r["split"]): r["value"] for r in rows if r["metric"] == "token_acc"}
print("| K | RoPE seq_acc | NoPE seq_acc | RoPE token_acc | NoPE token_acc |")
print("|---|---|---|---|---|")
for k in range(2, 21):
    s = f"len={k}"
    print(f"| {k} | {100*acc['rope', s]:.1f} | {100*acc['nope', s]:.1f} | {100*tok['rope', s]:.1f} | {100*tok['nope', s]:.1f} |")
