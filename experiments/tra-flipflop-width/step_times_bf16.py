"""Step time of the Table 1 models at the paper's scale (512 tokens) on a GPU: fp32 vs bf16 autocast,
batch 64 and 32 (section 3 of step-times-h100.txt). python step_times_bf16.py [MODEL ...]"""
import time, torch
from lengen import resolve
from lengen.recipes.tra_flipflop import model_config
from lengen.recipes.estimate import time_training_steps
from lengen.rundir.load import prepare
import sys
for m in sys.argv[1:] or ("NoPE", "TRA", "CoPE", "FoT", "Diff"):
    for prec in ("fp32", "bf16"):
        for bs in (64, 32):
            d = model_config(m, "paper", 0, device="cuda")
            d["train"]["precision"] = prec; d["train"]["batch_size"] = bs
            try:
                cfg = resolve(d)
                task, model = prepare(cfg)
                s = time_training_steps(cfg.config, task, model, steps=10, warmup=3, device="cuda")
                print(f"{m} {prec} B={bs}: {s*1000:.1f} ms/step", flush=True)
            except Exception as e:
                print(m, prec, bs, "FAILED", type(e).__name__, str(e)[:200], flush=True)
