"""The budget probe's rule (PLAN.md), in code, committed before any of the probe's runs.

    python results/bench-cpu/v3/budget-probe/verdict.py    # prints and writes verdict.md

Pairs: Rand. RoPE on reverse and reverse string, NoPE on flip-flop, missing duplicate and
reverse, each through the protocol at longer steps (probe.py's ``STEPS_FACTOR``): three rates
on seed 0, the best on validation chosen, seeds 1 and 2 at it; a pair's counted runs are seed
0 at the chosen rate and seeds 1 and 2. A run fitted when the cell's own rule said so
(``fitted``). Failed runs (no score) are left out of the counts (PLAN.md).
"""
from __future__ import annotations

import csv
import json
import os
import ast

HERE = os.path.dirname(os.path.abspath(__file__))
V3 = os.path.dirname(HERE)
SEEDS = (0, 1, 2)
PAIRS = (("Rand. RoPE", "reverse"), ("Rand. RoPE", "reverse_string"), ("NoPE", "flipflop"),
         ("NoPE", "missing_duplicate"), ("NoPE", "reverse"))
#: cells where no budget can fit NoPE (an encoder without positions; PLAN.md)
NOPE_NEVER = ("bucket_sort", "reverse_string", "even_pairs")
BAR = {"Rand. RoPE": 7, "NoPE": 9 - len(NOPE_NEVER)}
K, N = 2, 3              # a pair fits on at least 2 of its 3 counted runs
V3_STEPS = {"flipflop": 2500, "missing_duplicate": 4000, "reverse": 4000, "reverse_string": 6000}


def factors() -> dict[str, int]:
    """probe.py's ``STEPS_FACTOR``, read without running probe.py (which patches the battery),
    checked to name v3's cells with v3's steps."""
    tree = ast.parse(open(os.path.join(HERE, "probe.py")).read())
    found = [ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.AnnAssign | ast.Assign)
             and "STEPS_FACTOR" in ast.unparse(n.targets[0] if isinstance(n, ast.Assign) else n.target)]
    assert len(found) == 1, "STEPS_FACTOR"
    from lengen.bench.battery import default_steps
    assert {c: default_steps(c) for c in found[0]} == V3_STEPS, "battery v3's steps"
    return found[0]


def rows() -> list[dict]:
    path = os.path.join(HERE, "runs.csv")
    return list(csv.DictReader(open(path, newline=""))) if os.path.exists(path) else []


def steps_of(run: str) -> int:
    """train.steps of a run's committed resolved config."""
    with open(os.path.join(HERE, "configs", run + ".json")) as f:
        return int(json.load(f)["train"]["steps"])


def counted(variant: str, cell: str, every: list[dict]) -> dict[int, dict]:
    """seed -> the pair's counted, finished row (checked: the candidate's steps, one rate, the
    protocol's own choice on seed 0's grid)."""
    mine = [r for r in every if r["variant"] == variant and r["cell"] == cell]
    want = factors()[cell] * V3_STEPS[cell]
    for r in mine:
        assert int(float(r["steps"])) == want, (variant, cell, r["steps"])
        name = f"{variant.replace(' ', '_')}--{cell}--s{int(float(r['seed']))}--lr{float(r['lr']):g}"
        assert steps_of(name) == want, (name, "config steps")
    tune = [dict(r, val=float(r["val"])) for r in mine if r["role"] == "tune"
            and r["status"] in ("ok", "not fitted")]
    out = {}
    if len(tune) == 3:
        from lengen.bench.battery import default_lr
        from lengen.bench.run import select_lr       # the protocol's rule, as the bench applied it
        chosen = select_lr(tune, default_lr(cell))
        for r in mine:
            if r["counted"] == "True":
                assert abs(float(r["lr"]) - chosen) < 1e-12, (variant, cell, "chosen rate")
    for r in mine:
        if r["counted"] == "True" and r["status"] in ("ok", "not fitted"):
            s = int(float(r["seed"]))
            assert s in SEEDS and s not in out, (variant, cell, s)
            out[s] = r
    return out


def decide(runs: dict[int, dict]) -> tuple[int, int, bool | None]:
    k = sum(r["fitted"] == "True" for r in runs.values())
    n = len(runs)
    if k >= K:
        return k, n, True
    if n - k > N - K:
        return k, n, False
    return k, n, None


def v3_fitted(variant: str) -> list[str]:
    sc = csv.DictReader(open(os.path.join(V3, "scorecard.csv"), newline=""))
    return [r["cell"] for r in sc if r["variant"] == variant and r["fit_k"] not in ("", None)
            and float(r["fit_k"]) >= K]


def verdict() -> str:
    every = rows()
    lines = ["# Budget probe: longer budgets on four cells for NoPE and Rand. RoPE (written by "
             "verdict.py)", "",
             "| pair | steps (v3's) | chosen rate | fitted k/n | in-distribution score by seed "
             "| pair |", "|---|---|---|---|---|---|"]
    result = {}
    for variant, cell in PAIRS:
        runs = counted(variant, cell, every)
        k, n, fits = decide(runs)
        result[variant, cell] = fits
        steps = f"{factors()[cell] * V3_STEPS[cell]:,} ({V3_STEPS[cell]:,})"
        rate = f"{float(runs[min(runs)]['lr']):g}" if runs else "-"
        seen = ", ".join(f"{s}: {float(runs[s]['seen']):.3f}" for s in sorted(runs)) or "-"
        word = {True: "fits", False: "does not fit", None: "undecided"}[fits]
        lines.append(f"| {variant}, {cell} | {steps} | {rate} | {k}/{n} | {seen} | {word} |")
    lines += ["", "## Rule", ""]
    cells = sorted({c for _, c in PAIRS})
    helps = {c: all(result[p] for p in PAIRS if p[1] == c) for c in cells}
    for c in cells:
        probed = [result[p] for p in PAIRS if p[1] == c]
        word = ("helps" if helps[c] else "undecided" if None in probed and False not in probed
                else "does not help")
        lines.append(f"- {c} at x{factors()[c]}: {word}")
    counts, reached = {}, {}
    for variant in BAR:
        have = set(v3_fitted(variant)) | {c for (v, c), f in result.items() if v == variant and f}
        counts[variant] = len(have)
        reached[variant] = len(have) >= BAR[variant]
        lines.append(f"- {variant}: {len(have)} of 9 cells with the pairs that fit "
                     f"({', '.join(sorted(have))}); the bar: {BAR[variant]}")
    undecided = [f"{v}, {c}" for (v, c), f in result.items() if f is None]
    if all(reached.values()):
        outcome = ("the candidate brings both to the bar: a battery v4 takes the helping cells' "
                   "budgets (" + ", ".join(c for c in cells if helps[c]) + ") and every "
                   "baseline's rows on them are rerun (later parts)")
    elif undecided and not any(f is False for f in result.values()):
        outcome = "no verdict yet: undecided pairs " + "; ".join(undecided)
    elif reached["Rand. RoPE"]:
        need = sorted(c for v, c in PAIRS if v == "Rand. RoPE")
        outcome = ("the candidate brings Rand. RoPE to the bar, not NoPE (" + "; ".join(
            f"{v}, {c}" for (v, c), f in result.items() if f is not True) + "): a battery v4 "
                   "taking the budgets of " + ", ".join(need) + " would leave NoPE alone below "
                   "it; the card stays at v3 until such a v4 is run")
    else:
        failing = [f"{v}, {c}" for (v, c), f in result.items() if f is False]
        outcome = ("the candidate does not bring both to the bar (pairs that do not fit: "
                   + ("; ".join(failing) or "none") + (f"; undecided: {'; '.join(undecided)}"
                                                      if undecided else "")
                   + "): the card stays at v3")
    lines += ["", f"**Outcome:** {outcome}.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    text = verdict()
    print(text)
    tmp = os.path.join(HERE, "verdict.md.tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, os.path.join(HERE, "verdict.md"))
