"""How the v3 card's RoPE, FIRE and ALiBi addition rows were made (parts.csv, first part).

    python results/bench-cpu/v3/seed_from_probe12.py PROBE_DIRS OUT

Seed a v3 bench folder with probe 12's trained addition runs of RoPE, FIRE and ALiBi under
the baselines' run names (seed 0 at every rate, seeds 1 and 2 at the chosen rate), after
checking each stored config equals the one battery v3 builds for the baseline apart from the
name and the runtime keys. The bench then re-evaluates them (name differs -> 'eval').
The probe's parts wrote their runs into PROBE_DIRS/p12-RoPE, p12-FIRE and p12-ALiBi (its
``--out`` folders); ``lengen bench --baselines-only RoPE FIRE ALiBi --cells addition --out OUT``
then reads them back.
"""
import csv
import json
import os
import shutil
import sys

from lengen.bench.run import BASELINES, _spec, run_name
from lengen.config import RUNTIME_KEYS, config_diff, resolve

PROBES, OUT = sys.argv[1], sys.argv[2]
os.makedirs(OUT, exist_ok=True)
for s in ("RoPE", "FIRE", "ALiBi"):
    src = os.path.join(PROBES, f"p12-{s}")
    rows = list(csv.DictReader(open(os.path.join(src, "runs.csv"))))
    chosen = {float(r["selected_lr"]) for r in rows}
    assert len(chosen) == 1, chosen
    lr = chosen.pop()
    want = [(0, x) for x in (0.001, 0.002, 0.004)] + [(1, lr), (2, lr)]
    for seed, rate in want:
        old = run_name(f"{s}-b512g", "addition", seed, rate)
        spec = _spec(s, BASELINES[s], "addition", "cpu", seed, rate, "full",
                     "tune" if seed == 0 else "final")
        built = resolve(spec.config, check_device=False).config.to_dict()
        stored = json.load(open(os.path.join(src, old, "config.json")))
        diff = config_diff(stored, built, RUNTIME_KEYS + ("name",))
        assert diff == [], (old, diff)
        dst = os.path.join(OUT, spec.name)
        assert not os.path.exists(dst), dst
        shutil.copytree(os.path.join(src, old), dst, symlinks=True)
        print(old, "->", spec.name)
