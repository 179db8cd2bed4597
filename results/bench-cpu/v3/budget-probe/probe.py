"""The budget probe (PLAN.md): ``lengen bench`` with four cells trained for longer than battery
v3 trains them, every other setting v3's. Not a lengen feature: a probe measures.

    python results/bench-cpu/v3/budget-probe/probe.py --baselines-only 'Rand. RoPE' \
        --cells reverse reverse_string --scale cpu --workers 2 --threads 1 --out DIR --baselines none

``STEPS_FACTOR`` multiplies a cell's steps; the config is then what battery v3's own
``cell_config(cell, steps=...)`` builds, the path the fit search's ``steps-x2`` and ``steps-x4``
rungs take (warmup, checkpoint and log intervals follow the steps). The change is made at
import, outside the ``__main__`` guard, so that every spawned worker (which re-imports this
file) makes it too. Each run's stored ``config.json`` shows ``train.steps``.
"""
import sys

from lengen.bench import battery

#: cell -> factor on battery v3's steps at the cpu scale (PLAN.md says why these)
STEPS_FACTOR = {"flipflop": 4, "missing_duplicate": 4, "reverse": 2, "reverse_string": 2}

_v3_cell_config = battery._cell_config


def _longer(cell, scale, s, m, seed, keep_all, steps=None):
    if steps is None and scale == "cpu" and cell in STEPS_FACTOR:
        steps = STEPS_FACTOR[cell] * _v3_cell_config(cell, scale, s, m, seed, keep_all)["train"]["steps"]
    return _v3_cell_config(cell, scale, s, m, seed, keep_all, steps)


battery._cell_config = _longer

if __name__ == "__main__":
    from lengen.cli import main
    sys.exit(main(["bench", *sys.argv[1:]]))
