"""Addition probe 12's rule (PLAN.md), in code, committed before any of the probe's runs.

    python results/bench-cpu/v2/addition-probe-12/verdict.py    # prints and writes verdict.md

Arms: FIRE, then RoPE and ALiBi, at battery v2's addition cell with 512 examples a step instead
of 64 (6,000 steps), through the protocol: three rates on seed 0, the best on validation
chosen, seeds 1..4 at it; a scheme's counted runs are seed 0 at the chosen rate and seeds 1..4.
A run fitted when the cell's own rule said so (``fitted``: mean exact match over 1..5 digits
>= 95%). An arm with two unfitted counted runs cannot reach four of five: the candidate does
not qualify, whatever runs were left (PLAN.md's early stop). Failed runs (no score) are left
out of the counts (PLAN.md).
"""
from __future__ import annotations

import csv
import json
import math
import os

HERE = os.path.dirname(os.path.abspath(__file__))
SEEDS = list(range(5))
SCHEMES = ("FIRE", "RoPE", "ALiBi")     # stage order (FIRE first)
GRID = (0.001, 0.002, 0.004)
BATCH, STEPS = 512, 6000
QUALIFY_K = 4            # of 5 counted runs at batch 512, for each of the three schemes
Z = 1.959964             # 95% Wilson interval


def read(path: str, variant: str) -> dict[int, dict]:
    """counted, finished addition rows of ``variant`` in ``path`` by seed (missing file: none;
    a failed run, which has no score, is left out: PLAN.md)."""
    if not os.path.exists(path):
        return {}
    rows = {}
    for r in csv.DictReader(open(path, newline="")):
        if (r["variant"] == variant and r["cell"] == "addition" and r["counted"] == "True"
                and r["status"] in ("ok", "not fitted")):
            assert int(r["seed"]) not in rows, (path, variant, r["seed"])
            rows[int(r["seed"])] = r
    return rows


def wilson(k: int, n: int) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    centre = (k + Z * Z / 2) / (n + Z * Z)
    half = Z * math.sqrt(k * (n - k) / n + Z * Z / 4) / (n + Z * Z)
    return max(0.0, centre - half), min(1.0, centre + half)


def batch_of(variant: str, seed: int, lr: float) -> int:
    """train.batch_size of a run's committed resolved config (checked to be the arm's scheme)."""
    name = f"{variant}--addition--s{seed}--lr{lr:g}.json"
    with open(os.path.join(HERE, "configs", name)) as f:
        cfg = json.load(f)
    assert cfg["model"]["posenc"] == variant.split("-")[0].lower(), (name, cfg["model"]["posenc"])
    return int(cfg["train"]["batch_size"])


def arms() -> dict[str, dict]:
    """scheme -> seed -> counted, finished row at batch 512 (all at the one chosen rate)."""
    out = {}
    for scheme in SCHEMES:
        rows = {s: r for s, r in read(os.path.join(HERE, "runs.csv"), f"{scheme}-b512g").items()
                if s in SEEDS}
        rates = {float(r["lr"]) for r in rows.values()}
        assert len(rates) <= 1, (scheme, rates)
        for s, r in rows.items():
            assert any(abs(float(r["lr"]) - g) < 1e-12 for g in GRID), (scheme, r["lr"])
            assert abs(float(r["selected_lr"]) - float(r["lr"])) < 1e-12, (scheme, s)
            assert int(r["steps"]) == STEPS, (scheme, r["steps"])
            assert batch_of(f"{scheme}-b512g", s, float(r["lr"])) == BATCH, (scheme, s)
        if rows:
            grid_checked(scheme, float(next(iter(rows.values()))["lr"]))
        out[scheme] = rows
    return out


def grid_checked(scheme: str, chosen: float) -> None:
    """The bench ran the whole grid on seed 0 and chose ``chosen`` by the protocol's own rule
    on those rows' validation scores, and the later seeds ran as its final seeds (a probe run
    with one factor of the grid would fail); a bench stopped early has fewer final seeds."""
    every = [r for r in csv.DictReader(open(os.path.join(HERE, "runs.csv"), newline=""))
             if r["variant"] == f"{scheme}-b512g" and r["cell"] == "addition"]
    tune = [dict(r, val=float(r["val"])) for r in every if r["role"] == "tune"]
    assert sorted(float(r["lr"]) for r in tune) == list(GRID), (scheme, "grid")
    assert all(int(r["seed"]) == 0 for r in tune), (scheme, "tune seed")
    from lengen.bench.run import select_lr     # the protocol's rule, as the bench applied it
    assert abs(select_lr(tune, 0.002) - chosen) < 1e-12, (scheme, "chosen rate")
    finals = sorted(int(r["seed"]) for r in every if r["role"] == "final")
    assert finals == SEEDS[1:1 + len(finals)], (scheme, "final seeds")


def verdict() -> str:
    lines = ["# Addition probe 12: 512 examples a step through the protocol's grid (written by "
             "verdict.py)", "",
             "| arm | chosen rate | counted runs at batch 512 | fitted k/n | 95% Wilson | exact "
             "match over 1..5 digits by seed | fitted seeds |",
             "|---|---|---|---|---|---|---|"]
    counts = {}
    for scheme, rows in arms().items():
        seeds = sorted(rows)
        k = sum(rows[s]["fitted"] == "True" for s in seeds)
        counts[scheme] = (k, len(seeds))
        if not seeds:
            lines.append(f"| {scheme}-b512g | - | none | not run | - | - | - |")
            continue
        lo, hi = wilson(k, len(seeds))
        seen = ", ".join(f"{s}: {float(rows[s]['seen']):.3f}" for s in seeds)
        fitted = ", ".join(str(s) for s in seeds if rows[s]["fitted"] == "True") or "none"
        rate = float(rows[seeds[0]]["lr"])
        lines.append(f"| {scheme}-b512g | {rate:g} | {len(seeds)} | {k}/{len(seeds)} "
                     f"| {lo:.2f}-{hi:.2f} | {seen} | {fitted} |")
    short = ", ".join(f"{s} {k}/{n}" for s, (k, n) in counts.items() if n)
    stop = len(SEEDS) - QUALIFY_K + 1            # unfitted counted runs that end the probe
    out_of_reach = [s for s, (k, n) in counts.items() if n - k >= stop]
    if out_of_reach:
        ok, result = False, (f"{short}: {', '.join(out_of_reach)}: {stop} or more unfitted "
                             f"counted runs, so {QUALIFY_K} of 5 is out of reach: does not "
                             f"qualify")
    elif all(n == len(SEEDS) for _, n in counts.values()):
        ok = all(k >= QUALIFY_K for k, _ in counts.values())
        result = f"{short}: " + ("qualifies" if ok else "does not qualify")
    else:
        ok, result = None, f"{short or 'no runs'}: incomplete (an arm has not run all five seeds)"
    lines += ["", "## Rule", "", f"- batch 512 through the protocol: {result}", ""]
    if ok is None:
        outcome = "no verdict yet"
    elif ok:
        outcome = ("batch 512 qualifies: a battery v3's addition cell takes it, and every "
                   "baseline's addition rows are rerun under it (a later part)")
    else:
        outcome = "batch 512 does not qualify: the addition cell stays at v2"
    lines += [f"**Outcome:** {outcome}.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    text = verdict()
    print(text)
    tmp = os.path.join(HERE, "verdict.md.tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, os.path.join(HERE, "verdict.md"))
