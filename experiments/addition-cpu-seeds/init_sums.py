"""The addition cpu scale's FIRE model at init seed 0, built at each given commit: the sum of
its parameters (float64), to tell whether a seed starts from the same weights at two commits.

    PYTHONPATH=. python experiments/addition-cpu-seeds/init_sums.py 319610d 24de57b

Each commit's tree is unpacked with ``git archive`` into a temporary folder and the model is
built there in a fresh process by that commit's own ``run_config`` and ``prepare``.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

CHILD = r'''
import torch, lengen
torch.set_num_threads(1)
from lengen.recipes.addition.specs import run_config
try:
    from lengen.rundir.load import prepare
except ImportError:
    from lengen.train.loop import prepare
task, net = prepare(lengen.resolve(run_config("fire", "cpu", 0)))
print(repr(sum(float(p.double().sum()) for p in net.parameters())))
'''

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def param_sum(commit: str) -> str:
    with tempfile.TemporaryDirectory() as tree:
        archive = subprocess.run(["git", "archive", commit], cwd=ROOT, capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
        env = dict(os.environ, PYTHONPATH=tree, OMP_NUM_THREADS="1")
        out = subprocess.run([sys.executable, "-c", CHILD], cwd=tree, env=env,
                             capture_output=True, text=True, check=True).stdout
        return out.strip().splitlines()[-1]


if __name__ == "__main__":
    for c in sys.argv[1:]:
        print(f"{c} {param_sum(c)}", flush=True)
