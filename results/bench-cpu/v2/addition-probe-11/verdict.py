"""Addition probe 11's rule (PLAN.md), in code, committed before any of the probe's runs.

    python results/bench-cpu/v2/addition-probe-11/verdict.py     # prints and writes verdict.md

Arms: ALiBi and FIRE, then RoPE, at battery v2's addition cell with 512 examples a step
instead of 64 (v2's 6,000 steps), seeds 0..4, each at the rate the protocol chose for it at v2.
A run fitted when the cell's own rule said so (``fitted``: mean exact match over 1..5 digits
>= 95%). An arm with two unfitted seeds cannot reach four of five: the candidate does not
qualify, whatever runs were left (PLAN.md's early stop).
"""
from __future__ import annotations

import csv
import json
import math
import os

HERE = os.path.dirname(os.path.abspath(__file__))
SEEDS = list(range(5))
SCHEMES = {"ALiBi": 0.001, "FIRE": 0.004, "RoPE": 0.004}     # stage order (ALiBi, FIRE first)
BATCH, STEPS = 512, 6000
QUALIFY_K = 4            # of 5 seeds at batch 512, for each of the three schemes
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


def config_of(variant: str, seed: int, lr: float) -> dict:
    """a run's committed resolved config."""
    name = f"{variant}--addition--s{seed}--lr{lr:g}.json"
    with open(os.path.join(HERE, "configs", name)) as f:
        return json.load(f)


def arms() -> dict[str, dict]:
    """scheme -> seed -> row at batch 512 and 6,000 steps."""
    out = {}
    for scheme, lr in SCHEMES.items():
        rows = {s: r for s, r in read(os.path.join(HERE, "runs.csv"), f"{scheme}-b512").items()
                if s in SEEDS}
        for s, r in rows.items():
            assert abs(float(r["lr"]) - lr) < 1e-12, (scheme, r["lr"])
            assert int(r["steps"]) == STEPS, (scheme, r["steps"])
            cfg = config_of(f"{scheme}-b512", s, lr)
            assert int(cfg["train"]["batch_size"]) == BATCH, (scheme, s)
            assert int(cfg["train"]["steps"]) == STEPS, (scheme, s)
        out[scheme] = rows
    return out


def verdict() -> str:
    lines = ["# Addition probe 11: 512 examples a step (written by verdict.py)",
             "",
             "| arm | rate | seeds run | fitted k/n | 95% Wilson | exact match over "
             "1..5 digits by seed | fitted seeds |",
             "|---|---|---|---|---|---|---|"]
    counts = {}
    for scheme, rows in arms().items():
        seeds = sorted(rows)
        k = sum(rows[s]["fitted"] == "True" for s in seeds)
        counts[scheme] = (k, len(seeds))
        if not seeds:
            lines.append(f"| {scheme}-b512 | {SCHEMES[scheme]:g} | none | not run | - | - | - |")
            continue
        lo, hi = wilson(k, len(seeds))
        seen = ", ".join(f"{s}: {float(rows[s]['seen']):.3f}" for s in seeds)
        fitted = ", ".join(str(s) for s in seeds if rows[s]["fitted"] == "True") or "none"
        lines.append(f"| {scheme}-b512 | {SCHEMES[scheme]:g} | {len(seeds)} | {k}/{len(seeds)} "
                     f"| {lo:.2f}-{hi:.2f} | {seen} | {fitted} |")
    short = ", ".join(f"{s} {k}/{n}" for s, (k, n) in counts.items() if n)
    out_of_reach = [s for s, (k, n) in counts.items() if n - k >= len(SEEDS) - QUALIFY_K + 1]
    if out_of_reach:
        ok, result = False, (f"{short}: {' and '.join(out_of_reach)} has "
                             f"{len(SEEDS) - QUALIFY_K + 1} or more unfitted seeds, so cannot "
                             f"fit on {QUALIFY_K} of 5: does not qualify")
    elif all(n == len(SEEDS) for _, n in counts.values()):
        ok = all(k >= QUALIFY_K for k, _ in counts.values())
        result = f"{short}: " + ("qualifies" if ok else "does not qualify")
    else:
        ok, result = None, f"{short or 'no runs'}: incomplete (an arm has not run all five seeds)"
    lines += ["", "## Rule", "", f"- batch 512 at 6,000 steps: {result}", ""]
    if ok is None:
        outcome = "no verdict yet"
    elif ok:
        outcome = ("batch 512 at 6,000 steps qualifies: a battery v3's addition cell takes it, "
                   "and every baseline's addition rows are rerun under it (a later part)")
    else:
        outcome = "batch 512 at 6,000 steps does not qualify: the addition cell stays at v2"
    lines += [f"**Outcome:** {outcome}.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    text = verdict()
    print(text)
    tmp = os.path.join(HERE, "verdict.md.tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, os.path.join(HERE, "verdict.md"))
