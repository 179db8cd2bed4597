"""Grid sweeps: named configs -> one run directory each, run locally (in sequence or in N
worker processes) or on Ray, resumable, failures recorded, all rows collected in one table.

    from lengen.sweep import Grid, run_sweep
    grid = Grid(base, axes={"scheme": {...}, "train.seed": [0, 1, 2]})
    result = run_sweep(grid, "runs/sweep", workers=2)
    df = result.frame()                      # every run's rows + axis tags + status
"""
from lengen.sweep.grid import Grid, RunSpec, apply_patch, as_specs
from lengen.sweep.local import (SweepResult, collect, default_threads, finished_rows, run_one,
                                run_sweep, training_span, write_results)

__all__ = ["Grid", "RunSpec", "SweepResult", "apply_patch", "as_specs", "collect", "default_threads",
           "finished_rows", "run_one", "run_sweep", "training_span", "write_results"]
