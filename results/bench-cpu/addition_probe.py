"""The addition-cell probe of results/bench-cpu/README.md: does the bench's addition cell (battery
v1, cpu scale) fit with the addition recipe's larger learning rates? Four schemes x lr {2e-3, 3e-3},
everything else the cell's (3,000 steps, batch 32, seed 0). Run from a lengen checkout:

    OMP_NUM_THREADS=1 python results/bench-cpu/addition_probe.py runs/bench-addition-probe

then score each run with lengen.bench.battery.score("addition", "cpu", rows) (addition-probe.csv).
"""
import sys

from lengen.bench.battery import cell_config
from lengen.sweep import Grid, run_sweep

if __name__ == "__main__":          # spawned sweep workers re-import this file
    grid = Grid(base=cell_config("addition", "cpu", seed=0),
                axes={"model.posenc": ["nope", "rope", "fire", "alibi"], "train.lr": [2e-3, 3e-3]})
    run_sweep(grid, sys.argv[1], workers=2, threads=1)
