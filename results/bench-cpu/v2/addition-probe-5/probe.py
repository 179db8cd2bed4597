"""Addition probe 5 (see PLAN.md): ``lengen bench`` on the addition cell with its index hints
drawn from the first ``LENGEN_PROBE_N_HINTS`` of the 102 hint symbols (the task's ``n_hints``)
and, when ``LENGEN_PROBE_LR_FACTOR`` is set, the learning-rate grid cut to that one factor of the
cell's default. Without the variables the cell and the grid are v2's. Not a lengen feature: a
probe measures, it never enters the card.

    LENGEN_PROBE_N_HINTS=12 python results/bench-cpu/v2/addition-probe-5/probe.py \
        --variant 'name=FIRE-H12 model.posenc=fire' --cells addition --scale cpu \
        --seeds 0 1 2 3 4 --workers 2 --threads 1 --out DIR

The changes are made at import, outside the ``__main__`` guard, so that every spawned worker
(which re-imports this file) makes them too; the variables reach them through the environment.
Each run's stored ``config.json`` shows its ``task.kwargs.n_hints`` and ``train.lr``.
"""
import os
import sys

from lengen.bench import battery, run, scorecard

STEPS = os.environ.get("LENGEN_PROBE_STEPS")
if STEPS is not None:
    battery.SCALES["cpu"]["addition"] = dict(battery.SCALES["cpu"]["addition"], steps=int(STEPS))

FACTOR = os.environ.get("LENGEN_PROBE_LR_FACTOR")
if FACTOR is not None:
    for module in (battery, run, scorecard):
        module.LR_FACTORS = (float(FACTOR),)

N_HINTS = os.environ.get("LENGEN_PROBE_N_HINTS")
if N_HINTS is not None:
    _v2_cell_config = battery._cell_config

    def _cell_config(cell, *args, **kwargs):
        cfg = _v2_cell_config(cell, *args, **kwargs)
        if cell == "addition":
            cfg["task"]["kwargs"]["n_hints"] = int(N_HINTS)
        return cfg

    battery._cell_config = _cell_config

if __name__ == "__main__":
    from lengen.cli import main
    sys.exit(main(["bench", *sys.argv[1:]]))
