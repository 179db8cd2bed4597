"""The whole-sequence-loss pilot (README.md): ``lengen bench`` on the addition cell with the
training loss on every token of the example (``task.kwargs.loss_on='all'``, one reading of Zhou
et al. 2024's "causal language modeling", App. B) instead of battery v2's answer-only loss, with
the learning-rate grid cut to one factor of the cell's default (``LENGEN_PROBE_LR_FACTOR``), so
each scheme runs at the rate the protocol chose for it at v2. Not a lengen feature: a pilot
measures.

    LENGEN_PROBE_LR_FACTOR=2 python results/bench-cpu/v2/addition-loss-pilot/probe.py \
        --variant 'name=FIRE-all model.posenc=fire' --cells addition --scale cpu \
        --seeds 4 6 9 --workers 2 --threads 1 --out DIR

The change is made at import, outside the ``__main__`` guard, so that every spawned worker
(which re-imports this file) makes it too; the variables reach them through the environment.
Each run's stored ``config.json`` shows ``task.kwargs.loss_on`` and ``train.lr``.
"""
import os
import sys

from lengen.bench import battery, run, scorecard

_cell_config = battery.cell_config


def cell_config(cell, *args, **kwargs):
    cfg = _cell_config(cell, *args, **kwargs)
    if cell == "addition":
        cfg["task"]["kwargs"]["loss_on"] = "all"
    return cfg


battery.cell_config = run.cell_config = cell_config
FACTOR = float(os.environ["LENGEN_PROBE_LR_FACTOR"])
for module in (battery, run, scorecard):
    module.LR_FACTORS = (FACTOR,)

if __name__ == "__main__":
    from lengen.cli import main
    sys.exit(main(["bench", *sys.argv[1:]]))
