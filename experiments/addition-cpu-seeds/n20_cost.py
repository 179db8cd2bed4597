"""What training on 1..20 digits (issue 27 item 3: does FIRE's reach grow with N?) would cost at
the Fig. 3 search's budget on this machine: seconds per training step of FIRE (index hints,
reversed format, randomized positions) at 8,000 x 128 with the model of ``probe.py`` (2 blocks,
d_model 64, 4 heads), trained on 1..10 and on 1..20, one torch thread; and the minutes 8,000
steps would take at that rate (evaluation and start-up not counted).

    PYTHONPATH=. python experiments/addition-cpu-seeds/n20_cost.py [STEPS]   # -> n20_cost.txt

Timed through the training loop's own step (``lengen.recipes.estimate.time_training_steps``).
"""
import os
import subprocess
import sys

import torch

import lengen
from lengen.recipes import estimate
from lengen.recipes.addition import run_config
from lengen.rundir.load import prepare

HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "results", "addition-cpu-seeds")   # the results folder this script reads and writes


def main(steps: int = 20) -> None:
    torch.set_num_threads(1)
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True, cwd=HERE).stdout.strip() or "unknown"
    lines = [f"lengen {rev}, torch {torch.__version__}, one thread, {steps} timed steps after 3"]
    rate = {}
    for N in (10, 20):
        cfg = run_config("fire", "cpu", seed=0, data_seed=0, N=N)
        cfg["model"].update(d_model=64, n_layers=2, d_ff=256, n_heads=4)
        cfg["train"].update(lr=3e-3, steps=8000, batch_size=128)
        cfg = lengen.resolve(cfg)
        task, model = prepare(cfg)
        sec = estimate.time_training_steps(cfg.config, task, model, steps=steps, warmup=3)
        rate[N] = sec
        lines.append(f"N={N}: {sec:.3f} s/step, 8000 steps = {sec * 8000 / 60:.1f} min")
    lines.append(f"N=20 / N=10 step time: {rate[20] / rate[10]:.2f}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    with open(os.path.join(HERE, "n20_cost.txt"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
