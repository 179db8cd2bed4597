"""Addition probe 6's rule (PLAN.md), in code, committed before any of the probe's new runs.

    python results/bench-cpu/v2/addition-probe-6/verdict.py     # prints and writes verdict.md

Stage 1: RoPE on the addition cell at d_model 256 (d_ff 512, 4 heads), everything else battery
v2's, under v2's full protocol (seed 0 at 1e-3, 2e-3, 4e-3; the rate chosen by ``lengen bench``
on the validation split; seeds 1 and 2 at it). ``runs.csv`` here is what ``lengen bench`` wrote;
each run's config is in ``configs/``. A run fitted when the cell's own rule said so
(``fitted``: mean exact match over 1..5 digits >= 95%). Stage 2 (FIRE and ALiBi likewise) runs
only when RoPE passes; its rows, when present, are read the same way.
"""
from __future__ import annotations

import csv
import json
import math
import os

HERE = os.path.dirname(os.path.abspath(__file__))
SEEDS = [0, 1, 2]
GRID = (0.001, 0.002, 0.004)      # the cell's default 2e-3 x {0.5, 1, 2}
STEPS, D_MODEL = 6000, 256
QUALIFY_K = 2                     # of 3 seeds, for each scheme
Z = 1.959964                      # 95% Wilson interval


def read(variant: str) -> list[dict]:
    """addition rows of ``variant`` in runs.csv (missing file: none), each checked against its
    stored config."""
    path = os.path.join(HERE, "runs.csv")
    if not os.path.exists(path):
        return []
    rows = []
    for r in csv.DictReader(open(path, newline="")):
        if r["variant"] != variant or r["cell"] != "addition":
            continue
        lr = float(r["lr"])
        assert int(r["seed"]) in SEEDS and any(abs(lr - g) < 1e-12 for g in GRID), r
        assert int(r["steps"]) == STEPS, r
        name = f"{variant}--addition--s{int(r['seed'])}--lr{lr:g}"
        cfg = json.load(open(os.path.join(HERE, "configs", name + ".json")))
        assert cfg["model"]["d_model"] == D_MODEL and cfg["model"]["n_layers"] == 2, name
        assert cfg["train"]["lr"] == lr and cfg["train"]["steps"] == STEPS, name
        rows.append(r)
    return rows


def wilson(k: int, n: int) -> tuple[float, float]:
    if n == 0:
        return 0.0, 1.0
    centre = (k + Z * Z / 2) / (n + Z * Z)
    half = Z * math.sqrt(k * (n - k) / n + Z * Z / 4) / (n + Z * Z)
    return max(0.0, centre - half), min(1.0, centre + half)


def counted(rows: list[dict]) -> dict[int, dict]:
    out = {}
    for r in rows:
        if r["counted"] == "True":
            s = int(r["seed"])
            assert s not in out, r
            out[s] = r
    return out


def verdict() -> str:
    lines = ["# Addition probe 6: d_model 256 under the protocol's rate grid (written by "
             "verdict.py)", "", "## Seed 0 at each rate (the protocol's choice: best validation)",
             "", "| arm | rate | validation | in-distribution | fitted | chosen |",
             "|---|---|---|---|---|---|"]
    counts = {}
    for scheme in ("RoPE", "FIRE", "ALiBi"):
        rows = read(f"{scheme}-d256")
        for r in sorted((r for r in rows if r["seed"] == "0"), key=lambda r: float(r["lr"])):
            chosen = abs(float(r["lr"]) - float(r["selected_lr"])) < 1e-12
            lines.append(f"| {scheme}-d256 | {float(r['lr']):g} | {float(r['val']):.3f} | "
                         f"{float(r['seen']):.3f} | {r['fitted']} | {'yes' if chosen else ''} |")
        c = counted(rows)
        if c:
            counts[scheme] = c
    lines += ["", "## Counted seeds (at the chosen rate)", "",
              "| arm | rate | seeds | fitted k/n | 95% Wilson | fitted seeds | OOD mean of each "
              "fitted run (not part of the rule) |", "|---|---|---|---|---|---|---|"]
    for scheme, c in counts.items():
        seeds = sorted(c)
        fitted = [s for s in seeds if c[s]["fitted"] == "True"]
        lo, hi = wilson(len(fitted), len(seeds))
        rate = ", ".join(sorted({f"{float(c[s]['lr']):g}" for s in seeds}))
        ood = ", ".join(f"{float(c[s]['ood']):.3f} (seed {s})" for s in fitted) or "-"
        lines.append(f"| {scheme}-d256 | {rate} | {len(seeds)} | {len(fitted)}/{len(seeds)} | "
                     f"{lo:.2f}-{hi:.2f} | {', '.join(map(str, fitted)) or 'none'} | {ood} |")
    k = {s: sum(r["fitted"] == "True" for r in c.values()) for s, c in counts.items()}
    n = {s: len(c) for s, c in counts.items()}
    lines += ["", "## Rule", ""]
    if n.get("RoPE") != len(SEEDS):
        outcome = "stage 1 not finished: no verdict"
    elif k["RoPE"] < QUALIFY_K:
        outcome = (f"RoPE-d256 fits on {k['RoPE']} of 3 seeds (< {QUALIFY_K}): the candidate "
                   "does not qualify; stage 2 is not run and the addition cell stays at v2")
    elif not all(n.get(s) == len(SEEDS) for s in ("FIRE", "ALiBi")):
        outcome = (f"RoPE-d256 fits on {k['RoPE']} of 3 seeds: stage 2 (FIRE-d256 and "
                   "ALiBi-d256 under the same protocol) is to run")
    elif all(k[s] >= QUALIFY_K for s in ("RoPE", "FIRE", "ALiBi")):
        outcome = ("RoPE, FIRE and ALiBi at d_model 256 each fit on at least 2 of 3 seeds: the "
                   "candidate qualifies and goes to battery v3 (every baseline's addition rows "
                   "rerun under the full protocol, later parts)")
    else:
        outcome = ("; ".join(f"{s} {k[s]}/3" for s in ("RoPE", "FIRE", "ALiBi"))
                   + ": the candidate does not qualify; the addition cell stays at v2")
    lines += [f"**Outcome:** {outcome}.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    text = verdict()
    print(text)
    tmp = os.path.join(HERE, "verdict.md.tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, os.path.join(HERE, "verdict.md"))
