"""The batch pilot (README.md): ``lengen bench`` on the addition cell with
``LENGEN_PROBE_BATCH`` examples per step (battery v2: 64; Zhou et al. 2024 train on 128 packed
sequences of 2,048 tokens, by our estimate about two thousand examples a step) and, if set,
``LENGEN_PROBE_STEPS`` steps (v2: 6,000; as probe 4's ``probe.py``), with the learning-rate
grid cut to one factor of the cell's default (``LENGEN_PROBE_LR_FACTOR``; unset, the
protocol's whole grid: probe 9). Not a lengen feature: a pilot measures.

    LENGEN_PROBE_BATCH=256 LENGEN_PROBE_LR_FACTOR=2 \
        python results/bench-cpu/v2/addition-batch-pilot/probe.py \
        --variant 'name=RoPE-b256 model.posenc=rope' --cells addition --scale cpu \
        --seeds 20 21 --workers 2 --threads 1 --out DIR

The change is made at import, outside the ``__main__`` guard, so that every spawned worker
(which re-imports this file) makes it too; the variables reach them through the environment.
Each run's stored ``config.json`` shows ``train.batch_size``, ``train.steps`` and ``train.lr``.
"""
import os
import sys

from lengen.bench import battery, run, scorecard

_change = {"batch_size": int(os.environ["LENGEN_PROBE_BATCH"])}
if os.environ.get("LENGEN_PROBE_STEPS"):
    _change["steps"] = int(os.environ["LENGEN_PROBE_STEPS"])
battery.SCALES["cpu"]["addition"] = dict(battery.SCALES["cpu"]["addition"], **_change)
if os.environ.get("LENGEN_PROBE_LR_FACTOR"):      # unset: the protocol's whole grid
    FACTOR = float(os.environ["LENGEN_PROBE_LR_FACTOR"])
    for module in (battery, run, scorecard):
        module.LR_FACTORS = (FACTOR,)

if __name__ == "__main__":
    from lengen.cli import main
    sys.exit(main(["bench", *sys.argv[1:]]))
