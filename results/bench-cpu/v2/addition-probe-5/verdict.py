"""Addition probe 5's rule (PLAN.md), in code, committed before any of the probe's counted runs.

    python results/bench-cpu/v2/addition-probe-5/verdict.py     # prints and writes verdict.md

Arms: RoPE, FIRE and ALiBi on the addition cell at d_model 256 (d_ff 512, 4 heads), everything
else battery v2's, at the cell's default rate 2e-3, seeds 0..2 (``runs.csv`` here; each run's
config in ``configs/``). A run fitted when the cell's own rule said so (``fitted``: mean exact
match over 1..5 digits >= 95%).
"""
from __future__ import annotations

import csv
import json
import math
import os

HERE = os.path.dirname(os.path.abspath(__file__))
SEEDS = [0, 1, 2]
SCHEMES = ("RoPE", "FIRE", "ALiBi")
LR, STEPS, D_MODEL = 0.002, 6000, 256
QUALIFY_K = 2            # of 3 seeds, for each of the three schemes
Z = 1.959964             # 95% Wilson interval


def read(variant: str) -> dict[int, dict]:
    """counted addition rows of ``variant`` in runs.csv by seed (missing file: none), each
    checked against its stored config."""
    path = os.path.join(HERE, "runs.csv")
    if not os.path.exists(path):
        return {}
    rows = {}
    for r in csv.DictReader(open(path, newline="")):
        if r["variant"] != variant or r["cell"] != "addition" or r["counted"] != "True":
            continue
        s = int(r["seed"])
        assert s not in rows and s in SEEDS, (variant, s)
        assert abs(float(r["lr"]) - LR) < 1e-12 and int(r["steps"]) == STEPS, r
        name = f"{variant}--addition--s{s}--lr{float(r['lr']):g}"
        cfg = json.load(open(os.path.join(HERE, "configs", name + ".json")))
        assert cfg["model"]["d_model"] == D_MODEL and cfg["model"]["n_layers"] == 2, name
        assert cfg["train"]["lr"] == LR and cfg["train"]["steps"] == STEPS, name
        rows[s] = r
    return rows


def wilson(k: int, n: int) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    centre = (k + Z * Z / 2) / (n + Z * Z)
    half = Z * math.sqrt(k * (n - k) / n + Z * Z / 4) / (n + Z * Z)
    return max(0.0, centre - half), min(1.0, centre + half)


def verdict() -> str:
    lines = ["# Addition probe 5: d_model 256 (written by verdict.py)", "",
             "| arm | rate | seeds run | fitted k/n | 95% Wilson | fitted seeds | OOD mean of "
             "each fitted run (not part of the rule) |", "|---|---|---|---|---|---|---|"]
    counts = {}
    for scheme in SCHEMES:
        rows = read(f"{scheme}-d256")
        seeds = sorted(rows)
        k = sum(rows[s]["fitted"] == "True" for s in seeds)
        counts[scheme] = (k, len(seeds))
        if not seeds:
            lines.append(f"| {scheme}-d256 | {LR:g} | none | not run | - | - | - |")
            continue
        lo, hi = wilson(k, len(seeds))
        fitted = [s for s in seeds if rows[s]["fitted"] == "True"]
        ood = ", ".join(f"{float(rows[s]['ood']):.3f} (seed {s})" for s in fitted) or "-"
        lines.append(f"| {scheme}-d256 | {LR:g} | {len(seeds)} | {k}/{len(seeds)} | "
                     f"{lo:.2f}-{hi:.2f} | {', '.join(map(str, fitted)) or 'none'} | {ood} |")
    ok = all(n == len(SEEDS) and k >= QUALIFY_K for k, n in counts.values())
    short = ", ".join(f"{s} {k}/{n}" for s, (k, n) in counts.items())
    lines += ["", "## Rule", "",
              f"- d_model 256: {short}: " + ("qualifies" if ok else
                                            f"does not qualify (each of the three needs >= "
                                            f"{QUALIFY_K} of seeds 0..2)"), ""]
    outcome = ("d_model 256 qualifies: it goes to battery v3's addition cell, and every "
               "baseline's addition rows are rerun under the full protocol (later parts)" if ok
               else "d_model 256 does not qualify: the addition cell stays at v2")
    lines += [f"**Outcome:** {outcome}.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    text = verdict()
    print(text)
    tmp = os.path.join(HERE, "verdict.md.tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, os.path.join(HERE, "verdict.md"))
