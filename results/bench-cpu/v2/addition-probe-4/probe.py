"""Addition probe 4 (see PLAN.md): ``lengen bench`` on the addition cell at
``LENGEN_PROBE_STEPS`` training steps (battery v2: 6,000; the schedule's warmup, cosine decay,
checkpoints and logging follow the steps, as in the fit search's longer rungs) with the
learning-rate grid cut to one factor of the cell's default (``LENGEN_PROBE_LR_FACTOR``), so each
scheme runs at the rate the protocol chose for it at v2. Not a lengen feature: a probe measures.

    LENGEN_PROBE_STEPS=12000 LENGEN_PROBE_LR_FACTOR=2 \
        python results/bench-cpu/v2/addition-probe-4/probe.py \
        --variant 'name=RoPE-x2 model.posenc=rope' --cells addition --scale cpu \
        --seeds 0 1 2 3 4 --workers 2 --threads 1 --out DIR

The change is made at import, outside the ``__main__`` guard, so that every spawned worker
(which re-imports this file) makes it too; the variables reach them through the environment.
Each run's stored ``config.json`` shows ``train.steps`` and ``train.lr``.
"""
import os
import sys

from lengen.bench import battery, run, scorecard

STEPS = int(os.environ["LENGEN_PROBE_STEPS"])
battery.SCALES["cpu"]["addition"] = dict(battery.SCALES["cpu"]["addition"], steps=STEPS)
FACTOR = float(os.environ["LENGEN_PROBE_LR_FACTOR"])
for module in (battery, run, scorecard):
    module.LR_FACTORS = (FACTOR,)

if __name__ == "__main__":
    from lengen.cli import main
    sys.exit(main(["bench", *sys.argv[1:]]))
