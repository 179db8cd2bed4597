"""Addition probe 2 (see PLAN.md): ``lengen bench`` on the addition cell with N training digits
in place of battery v2's 5, everything else v2's. Not a lengen feature: a probe picks a budget.

    LENGEN_PROBE_N=8 python results/bench-cpu/v2/addition-probe-2/probe.py \
        --variant 'name=RoPE-N8 model.posenc=rope' --cells addition --scale cpu \
        --workers 2 --threads 1 --out DIR

The change is made at import, outside the ``__main__`` guard, so that every spawned worker
(which re-imports this file) makes it too; ``LENGEN_PROBE_N`` reaches them through the
environment. Each run's stored ``config.json`` shows the task's ``max_train_length`` and the
evaluation lengths 1..2N it ran with.
"""
import os
import sys

from lengen.bench import battery

N = int(os.environ["LENGEN_PROBE_N"])
battery.SCALES["cpu"]["addition"] = dict(battery.SCALES["cpu"]["addition"], N=N)

if __name__ == "__main__":
    from lengen.cli import main
    sys.exit(main(["bench", *sys.argv[1:]]))
