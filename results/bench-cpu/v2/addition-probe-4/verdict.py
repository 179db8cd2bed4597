"""Addition probe 4's rule (PLAN.md), in code, committed before any of the probe's runs.

    python results/bench-cpu/v2/addition-probe-4/verdict.py     # prints and writes verdict.md

Arms: RoPE, FIRE and ALiBi at battery v2's model with the addition cell's steps doubled (12,000),
seeds 0..4, each at the rate the protocol chose for it at v2 (``runs.csv`` here). Each seed is
paired with the same scheme, seed and rate at v2's 6,000 steps: seeds 0..2 in ``../runs.csv``
(the ``counted`` rows), seeds 3..4 in ``../addition-probe-3/runs.csv``. A run fitted when the
cell's own rule said so (``fitted``: mean exact match over 1..5 digits >= 95%).
"""
from __future__ import annotations

import csv
import math
import os

HERE = os.path.dirname(os.path.abspath(__file__))
SEEDS = list(range(5))
SCHEMES = {"RoPE": 0.004, "FIRE": 0.004, "ALiBi": 0.001}
QUALIFY_K = 4            # of 5 seeds at 12,000 steps, for each of the three schemes
Z = 1.959964             # 95% Wilson interval


def read(path: str, variant: str) -> dict[int, dict]:
    """counted addition rows of ``variant`` in ``path`` by seed (missing file: none)."""
    if not os.path.exists(path):
        return {}
    rows = {}
    for r in csv.DictReader(open(path, newline="")):
        if r["variant"] == variant and r["cell"] == "addition" and r["counted"] == "True":
            assert int(r["seed"]) not in rows, (path, variant, r["seed"])
            rows[int(r["seed"])] = r
    return rows


def wilson(k: int, n: int) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    centre = (k + Z * Z / 2) / (n + Z * Z)
    half = Z * math.sqrt(k * (n - k) / n + Z * Z / 4) / (n + Z * Z)
    return max(0.0, centre - half), min(1.0, centre + half)


def arms() -> dict[str, tuple[dict, dict]]:
    """scheme -> (seed -> row at 12,000 steps, seed -> row at 6,000 steps)."""
    out = {}
    for scheme, lr in SCHEMES.items():
        x2 = {s: r for s, r in read(os.path.join(HERE, "runs.csv"), f"{scheme}-x2").items()
              if s in SEEDS}
        x1 = {s: r for s, r in read(os.path.join(HERE, "..", "runs.csv"), scheme).items()
              if s < 3}
        x1.update({s: r for s, r in read(os.path.join(HERE, "..", "addition-probe-3",
                                                      "runs.csv"), f"{scheme}-2L").items()
                   if s in (3, 4)})
        for rows, steps in ((x2, 12000), (x1, 6000)):
            for r in rows.values():
                assert abs(float(r["lr"]) - lr) < 1e-12, (scheme, r["lr"])
                assert int(r["steps"]) == steps, (scheme, r["steps"])
        out[scheme] = (x2, x1)
    return out


def verdict() -> str:
    lines = ["# Addition probe 4: twice the steps (written by verdict.py)", "",
             "| arm | rate | seeds at 12,000 steps | fitted k/n | 95% Wilson | the same seeds "
             "at 6,000 steps | fitted at 12,000 | fitted at 6,000 |",
             "|---|---|---|---|---|---|---|---|"]
    counts = {}
    for scheme, (x2, x1) in arms().items():
        seeds = sorted(x2)
        k2 = sum(x2[s]["fitted"] == "True" for s in seeds)
        k1 = sum(x1[s]["fitted"] == "True" for s in seeds if s in x1)
        n1 = sum(1 for s in seeds if s in x1)
        counts[scheme] = (k2, len(seeds))
        if not seeds:
            lines.append(f"| {scheme}-x2 | {SCHEMES[scheme]:g} | none | not run | - | - | - | - |")
            continue
        lo, hi = wilson(k2, len(seeds))
        f2 = ", ".join(str(s) for s in seeds if x2[s]["fitted"] == "True") or "none"
        f1 = ", ".join(str(s) for s in seeds if s in x1 and x1[s]["fitted"] == "True") or "none"
        lines.append(f"| {scheme}-x2 | {SCHEMES[scheme]:g} | {len(seeds)} | {k2}/{len(seeds)} | "
                     f"{lo:.2f}-{hi:.2f} | {k1}/{n1} | {f2} | {f1} |")
    ok = all(n == len(SEEDS) and k >= QUALIFY_K for k, n in counts.values())
    short = ", ".join(f"{s} {k}/{n}" for s, (k, n) in counts.items())
    lines += ["", "## Rule", "",
              f"- 12,000 steps: {short}: " + ("qualifies" if ok else
                                             f"does not qualify (each of the three needs >= "
                                             f"{QUALIFY_K} of seeds 0..4)"), ""]
    outcome = ("12,000 steps qualify: battery v3's addition cell takes them, and every "
               "baseline's addition rows are rerun under it (a later part)" if ok else
               "12,000 steps do not qualify: the addition cell stays at v2")
    lines += [f"**Outcome:** {outcome}.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    text = verdict()
    print(text)
    tmp = os.path.join(HERE, "verdict.md.tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, os.path.join(HERE, "verdict.md"))
