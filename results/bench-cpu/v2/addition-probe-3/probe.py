"""Addition probe 3 (see PLAN.md): ``lengen bench`` on the addition cell with the learning-rate
grid cut to ONE factor of the cell's default (``LENGEN_PROBE_LR_FACTOR``), so that extra seeds
run at the rate the protocol already chose on seed 0 for that scheme and model. Without the
variable the grid is v2's. Not a lengen feature: a probe measures, it never enters the card.

    LENGEN_PROBE_LR_FACTOR=2 python results/bench-cpu/v2/addition-probe-3/probe.py \
        --variant 'name=RoPE-2L model.posenc=rope' --cells addition --scale cpu \
        --seeds 3 4 5 6 7 8 9 --workers 2 --threads 1 --out DIR

The change is made at import, outside the ``__main__`` guard, so that every spawned worker
(which re-imports this file) makes it too; the variable reaches them through the environment.
Each run's stored ``config.json`` shows the rate it trained at (``train.lr``).
"""
import os
import sys

from lengen.bench import battery, run, scorecard

FACTOR = os.environ.get("LENGEN_PROBE_LR_FACTOR")
if FACTOR is not None:
    for module in (battery, run, scorecard):
        module.LR_FACTORS = (float(FACTOR),)

if __name__ == "__main__":
    from lengen.cli import main
    sys.exit(main(["bench", *sys.argv[1:]]))
