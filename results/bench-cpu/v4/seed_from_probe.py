"""How the v4 card's rows of three pairs were made (``parts.csv``, first row): Rand. RoPE on
reverse and reverse string and NoPE on reverse are the budget probe's runs
(``../v3/budget-probe/``, PLAN.md there), which trained these pairs through the full protocol
on the card's seeds 0..2 at exactly battery v4's budget (twice v3's steps) before v4 existed.

    python results/bench-cpu/v4/seed_from_probe.py     # appends their rows to runs.csv here

For each of the probe's rows of these pairs (seed 0 at every rate of the grid, seeds 1 and 2
at the chosen rate: five per pair) it checks that the config the probe stored equals the one
battery v4 builds for that baseline, seed, rate and cell (apart from the name and the runtime
keys), then appends the row with ``bench_version`` 4 (the battery whose config the run is; the
probe recorded 3, its battery, with steps changed by ``probe.py``) and copies the config to
``configs/``. Nothing else in a row changes: scores, seconds and the chosen rate are the
probe's. The probe's weights were not kept, so these runs are not evaluated again. Every check
comes before the first file is written; refuses to run twice.
"""
from __future__ import annotations

import csv
import json
import os

from lengen.bench.battery import VERSION
from lengen.bench.run import BASELINES, _spec
from lengen.config import RUNTIME_KEYS, config_diff, resolve
from lengen.fileio import write_csv_atomic, write_text_atomic

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE = os.path.join(os.path.dirname(HERE), "v3", "budget-probe")
PAIRS = (("Rand. RoPE", "reverse"), ("Rand. RoPE", "reverse_string"), ("NoPE", "reverse"))


def probe_rows() -> list[dict]:
    """The probe's rows of :data:`PAIRS`, each with the config it stored, checked against the
    config battery v4 builds (AssertionError naming the run otherwise)."""
    with open(os.path.join(PROBE, "runs.csv"), newline="") as f:
        rows = [r for r in csv.DictReader(f) if (r["variant"], r["cell"]) in PAIRS]
    assert len(rows) == 5 * len(PAIRS), len(rows)
    out = []
    for r in rows:
        seed, lr = int(r["seed"]), float(r["lr"])
        spec = _spec(r["variant"], BASELINES[r["variant"]], r["cell"], "cpu", seed, lr, "full",
                     r["role"])
        built = resolve(spec.config, check_device=False).config.to_dict()
        with open(os.path.join(PROBE, "configs", spec.name + ".json")) as f:
            text = f.read()
        stored = json.loads(text)
        diff = config_diff(stored, built, RUNTIME_KEYS + ("name",))
        assert diff == [], (spec.name, diff)
        assert int(r["steps"]) == built["train"]["steps"], spec.name
        out.append((dict(r, bench_version=str(VERSION)), spec.name, text))
    return out


def main() -> None:
    path = os.path.join(HERE, "runs.csv")
    with open(path, newline="") as f:
        have = list(csv.DictReader(f))
    if any((r["variant"], r["cell"]) in PAIRS for r in have):
        raise SystemExit(f"{path} already has rows of {PAIRS}: seed_from_probe.py runs once")
    seeded = probe_rows()
    for _, name, _ in seeded:
        dst = os.path.join(HERE, "configs", name + ".json")
        if os.path.exists(dst):
            raise SystemExit(f"{dst} exists")
    os.makedirs(os.path.join(HERE, "configs"), exist_ok=True)
    for _, name, text in seeded:      # the probe's file as it is
        write_text_atomic(text, os.path.join(HERE, "configs", name + ".json"))
    write_csv_atomic(have + [r for r, _, _ in seeded], path)
    print(f"{len(seeded)} rows of the budget probe appended to {path}")


if __name__ == "__main__":
    main()
