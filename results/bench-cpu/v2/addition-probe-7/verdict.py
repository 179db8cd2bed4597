"""Addition probe 7's rule (PLAN.md), in code, committed before any of the probe's runs.

    python results/bench-cpu/v2/addition-probe-7/verdict.py     # prints and writes verdict.md

Arms: FIRE, then RoPE and ALiBi, at battery v2's model with the addition cell's steps x4
(24,000), seeds 0..4, each at the rate the protocol chose for it at v2. Each seed is shown
beside the same scheme, seed and rate at 12,000 steps (``../addition-probe-4/runs.csv``). A run
fitted when the cell's own rule said so (``fitted``: mean exact match over 1..5 digits >= 95%).
"""
from __future__ import annotations

import csv
import math
import os

HERE = os.path.dirname(os.path.abspath(__file__))
SEEDS = list(range(5))
SCHEMES = {"FIRE": 0.004, "RoPE": 0.004, "ALiBi": 0.001}     # stage order
QUALIFY_K = 4            # of 5 seeds at 24,000 steps, for each of the three schemes
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
    """scheme -> (seed -> row at 24,000 steps, seed -> row at 12,000 steps)."""
    out = {}
    for scheme, lr in SCHEMES.items():
        x4 = {s: r for s, r in read(os.path.join(HERE, "runs.csv"), f"{scheme}-x4").items()
              if s in SEEDS}
        x2 = {s: r for s, r in read(os.path.join(HERE, "..", "addition-probe-4", "runs.csv"),
                                    f"{scheme}-x2").items() if s in SEEDS}
        for rows, steps in ((x4, 24000), (x2, 12000)):
            for r in rows.values():
                assert abs(float(r["lr"]) - lr) < 1e-12, (scheme, r["lr"])
                assert int(r["steps"]) == steps, (scheme, r["steps"])
        out[scheme] = (x4, x2)
    return out


def verdict() -> str:
    lines = ["# Addition probe 7: four times the steps (written by verdict.py)", "",
             "| arm | rate | seeds at 24,000 steps | fitted k/n | 95% Wilson | exact match over "
             "1..5 digits by seed | the same seeds at 12,000 steps | fitted at 24,000 | "
             "fitted at 12,000 |",
             "|---|---|---|---|---|---|---|---|---|"]
    counts = {}
    for scheme, (x4, x2) in arms().items():
        seeds = sorted(x4)
        k4 = sum(x4[s]["fitted"] == "True" for s in seeds)
        k2 = sum(x2[s]["fitted"] == "True" for s in seeds if s in x2)
        n2 = sum(1 for s in seeds if s in x2)
        counts[scheme] = (k4, len(seeds))
        if not seeds:
            lines.append(f"| {scheme}-x4 | {SCHEMES[scheme]:g} | none | not run | - | - | - | "
                         f"- | - |")
            continue
        lo, hi = wilson(k4, len(seeds))
        seen = ", ".join(f"{float(x4[s]['seen']):.3f}" for s in seeds)
        f4 = ", ".join(str(s) for s in seeds if x4[s]["fitted"] == "True") or "none"
        f2 = ", ".join(str(s) for s in seeds if s in x2 and x2[s]["fitted"] == "True") or "none"
        lines.append(f"| {scheme}-x4 | {SCHEMES[scheme]:g} | {len(seeds)} | {k4}/{len(seeds)} | "
                     f"{lo:.2f}-{hi:.2f} | {seen} | {k2}/{n2} | {f4} | {f2} |")
    fire_k, fire_n = counts["FIRE"]
    short = ", ".join(f"{s} {k}/{n}" for s, (k, n) in counts.items())
    if fire_n == len(SEEDS) and fire_k < QUALIFY_K:
        ok, result = False, (f"FIRE fits on {fire_k} of 5 (< {QUALIFY_K}): does not qualify; "
                             f"stage 2 (RoPE, ALiBi) is not run")
    elif all(n == len(SEEDS) for _, n in counts.values()):
        ok = all(k >= QUALIFY_K for k, _ in counts.values())
        result = f"{short}: " + ("qualifies" if ok else f"does not qualify (each of the three "
                                                        f"needs >= {QUALIFY_K} of seeds 0..4)")
    else:
        ok, result = None, f"{short}: incomplete (a stage has not run on all five seeds)"
    lines += ["", "## Rule", "", f"- 24,000 steps: {result}", ""]
    if ok is None:
        outcome = "no verdict yet"
    elif ok:
        outcome = ("24,000 steps qualify: a battery v3's addition cell takes them, and every "
                   "baseline's addition rows are rerun under it (a later part)")
    else:
        outcome = "24,000 steps do not qualify: the addition cell stays at v2"
    lines += [f"**Outcome:** {outcome}.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    text = verdict()
    print(text)
    tmp = os.path.join(HERE, "verdict.md.tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, os.path.join(HERE, "verdict.md"))
