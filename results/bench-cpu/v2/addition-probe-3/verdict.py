"""Addition probe 3's rule (PLAN.md), in code, committed before any of the probe's runs.

    python results/bench-cpu/v2/addition-probe-3/verdict.py     # prints and writes verdict.md

Arms: RoPE, FIRE and ALiBi at battery v2's model (2 layers) and at 3 layers. Seeds 0..2 of an
arm are the committed protocol rows at the rate chosen on seed 0 (``counted``): v2's
``../runs.csv`` for 2 layers, probe 1's ``../addition-probe/runs.csv`` for 3 layers; seeds 3..9
are this probe's ``runs.csv`` at the same rate. ALiBi at 3 layers has no committed rows: when
it runs, it runs the whole protocol on seeds 0..9 here. A run fitted when the cell's own rule
said so (``fitted``: mean exact match over 1..5 digits >= 95%).
"""
from __future__ import annotations

import csv
import math
import os

HERE = os.path.dirname(os.path.abspath(__file__))
SEEDS = list(range(10))
SCHEMES = ("RoPE", "FIRE", "ALiBi")
MODELS = ("2L", "3L")
QUALIFY_K = 7            # of 10 seeds, for each of the three schemes
ALPHA = 0.05             # two-sided Fisher exact test for "A fits more often than B"
Z = 1.959964             # 95% Wilson interval


def read(path: str, variant: str) -> dict[int, dict]:
    """counted addition rows of ``variant`` in ``path``, by seed (missing file: none)."""
    if not os.path.exists(path):
        return {}
    rows = {}
    for r in csv.DictReader(open(path, newline="")):
        if r["variant"] == variant and r["cell"] == "addition" and r["counted"] == "True":
            assert int(r["seed"]) not in rows, (path, variant, r["seed"])
            rows[int(r["seed"])] = r
    return rows


def arm_rows(scheme: str, model: str) -> dict[int, dict]:
    """seed -> row, from the committed rows and this probe's (PLAN.md, "Arms")."""
    probe = os.path.join(HERE, "runs.csv")
    if model == "2L":
        rows = {s: r for s, r in read(os.path.join(HERE, "..", "runs.csv"), scheme).items()
                if s < 3}
        new = {s: r for s, r in read(probe, f"{scheme}-2L").items() if s >= 3}
    elif scheme == "ALiBi":
        rows, new = {}, read(probe, "ALiBi-3L")
    else:
        rows = {s: r for s, r in read(os.path.join(HERE, "..", "addition-probe", "runs.csv"),
                                      f"{scheme}-3L").items() if s < 3}
        new = {s: r for s, r in read(probe, f"{scheme}-3L").items() if s >= 3}
    overlap = set(rows) & set(new)
    assert not overlap, (scheme, model, overlap)
    rows.update(new)
    rates = {float(r["lr"]) for r in rows.values()}
    assert len(rates) <= 1, f"{scheme}-{model} ran at more than one rate: {rates}"
    return rows


def wilson(k: int, n: int) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    centre = (k + Z * Z / 2) / (n + Z * Z)
    half = Z * math.sqrt(k * (n - k) / n + Z * Z / 4) / (n + Z * Z)
    return max(0.0, centre - half), min(1.0, centre + half)


def fisher(k1: int, n1: int, k2: int, n2: int) -> float:
    """two-sided Fisher exact p of the 2x2 table (k1, n1 - k1; k2, n2 - k2)."""
    K, N = k1 + k2, n1 + n2

    def p(x):
        return math.comb(n1, x) * math.comb(n2, K - x) / math.comb(N, K)

    observed = p(k1)
    return min(1.0, sum(p(x) for x in range(max(0, K - n2), min(K, n1) + 1)
                        if p(x) <= observed * (1 + 1e-9)))


def verdict() -> str:
    lines = ["# Addition probe 3: fit rates over ten seeds (written by verdict.py)", "",
             "| arm | rate | seeds | fitted k/n | 95% Wilson | seeds 1..9 | 95% Wilson 1..9 "
             "| fitted seeds |",
             "|---|---|---|---|---|---|---|---|"]
    stats = {}
    for model in MODELS:
        for scheme in SCHEMES:
            rows = arm_rows(scheme, model)
            seeds = sorted(rows)
            k = sum(rows[s]["fitted"] == "True" for s in seeds)
            k19 = sum(rows[s]["fitted"] == "True" for s in seeds if s >= 1)
            n19 = sum(1 for s in seeds if s >= 1)
            stats[scheme, model] = (k, len(seeds), seeds == SEEDS)
            if not seeds:
                lines.append(f"| {scheme}-{model} | - | none | not run | - | - | - | - |")
                continue
            lo, hi = wilson(k, len(seeds))
            lo19, hi19 = wilson(k19, n19)
            rate = float(next(iter(rows.values()))["lr"])
            fitted = ", ".join(str(s) for s in seeds if rows[s]["fitted"] == "True") or "none"
            lines.append(f"| {scheme}-{model} | {rate:g} | {seeds[0]}..{seeds[-1]} "
                         f"({len(seeds)}) | {k}/{len(seeds)} | {lo:.2f}-{hi:.2f} | "
                         f"{k19}/{n19} | {lo19:.2f}-{hi19:.2f} | {fitted} |")
    lines += ["", "## Which scheme fits more often (two-sided Fisher exact test, "
              f"p < {ALPHA} on the arms' seeds)", ""]
    for model in MODELS:
        for i, a in enumerate(SCHEMES):
            for b in SCHEMES[i + 1:]:
                ka, na, _ = stats[a, model]
                kb, nb, _ = stats[b, model]
                if not na or not nb:
                    lines.append(f"- {model}: {a} vs {b}: not both run")
                    continue
                p = fisher(ka, na, kb, nb)
                if p < ALPHA and ka != kb:
                    hi_, lo_ = (a, b) if ka / na > kb / nb else (b, a)
                    word = f"{hi_} fits more often than {lo_}"
                else:
                    word = "not separable"
                lines.append(f"- {model}: {a} {ka}/{na} vs {b} {kb}/{nb}: p = {p:.3f}, {word}")
    lines += ["", "## Rule", ""]
    qualified = [m for m in MODELS
                 if all(stats[s, m][2] and stats[s, m][0] >= QUALIFY_K for s in SCHEMES)]
    for m in MODELS:
        short = [f"{s} {stats[s, m][0]}/{stats[s, m][1]}" for s in SCHEMES]
        lines.append(f"- {m}: {', '.join(short)}: "
                     + ("qualifies" if m in qualified else
                        f"does not qualify (each of the three needs >= {QUALIFY_K} of seeds "
                        f"0..9)"))
    if "2L" in qualified:
        outcome = ("v2's model qualifies: the addition cell stays as it is, and its 3-seed "
                   "counts are read as draws of the fit rates above")
    elif "3L" in qualified:
        outcome = ("3 layers qualify and v2's model does not: battery v3's addition cell takes "
                   "3 layers, every baseline's addition rows are rerun under it")
    else:
        outcome = ("no model qualifies: the addition cell stays at v2, and the card's "
                   "RoPE-on-addition footnote cites these fit rates")
    lines += ["", f"**Outcome:** {outcome}.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    text = verdict()
    print(text)
    tmp = os.path.join(HERE, "verdict.md.tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, os.path.join(HERE, "verdict.md"))
