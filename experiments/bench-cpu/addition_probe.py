"""The addition-cell probes of results/bench-cpu/README.md: does the bench's addition cell (battery
v1, cpu scale) fit with the addition recipe's larger learning rates (four schemes x lr {2e-3, 3e-3},
3,000 steps), or with twice the steps (lr 1e-3, 6,000 steps)? Everything else is the cell's (batch
32, seed 0). Run from a lengen checkout:

    OMP_NUM_THREADS=1 python experiments/bench-cpu/addition_probe.py runs/bench-addition-probe lr
    OMP_NUM_THREADS=1 python experiments/bench-cpu/addition_probe.py runs/bench-addition-probe2 steps

then score each run with lengen.bench.battery.score("addition", "cpu", rows) (addition-probe.csv).
"""
import sys

from lengen.bench.battery import cell_config
from lengen.sweep import Grid, run_sweep

if __name__ == "__main__":          # spawned sweep workers re-import this file
    second = {"lr": {"train.lr": [2e-3, 3e-3]}, "steps": {"train.steps": [6000]}}[sys.argv[2]]
    grid = Grid(base=cell_config("addition", "cpu", seed=0),
                axes={"model.posenc": ["nope", "rope", "fire", "alibi"], **second})
    run_sweep(grid, sys.argv[1], workers=2, threads=1)
