"""Table 3 and Fig. 7 of the index-warping LM study on two seeds (issue 27 item 5): per column
and length, mean test perplexity over the seeds and its sample std, and each claim judged by
the rule in this folder's README (written before seed 1 started).

    PYTHONPATH=. python experiments/index-warping-lm-cpu/lm_seeds.py results.csv results-s1.csv

Writes ``lm_seeds.csv`` (one row per column x length: mean, std, n, per-seed values) and
``lm_seeds.md`` (the table at 1x..8x and the verdicts) next to this script.
"""
from __future__ import annotations

import csv
import os
import statistics
import sys

from lengen.fileio import write_csv_atomic, write_text_atomic

HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "results", "index-warping-lm-cpu")   # the results folder this script reads and writes
T = 128                                         # training context of the cpu scale
PAST = [2 * T, 4 * T, 6 * T, 8 * T]             # the paper's 2x..8x
MULT = ["RoPE", "RoPE+PI", "RandPE-8072", "RandPE-4096", "RandPE-1024"]
RANDPE = ["RandPE-8072", "RandPE-4096", "RandPE-1024"]
SEEN_FACTOR = 1.05                              # "hurts the seen length": above RoPE x 1.05


def load(paths):
    ppl = {}                                    # (model, length) -> {seed: ppl}
    for p in paths:
        with open(p, newline="") as f:
            for r in csv.DictReader(f):
                if r["metric"] == "ppl" and r.get("status", "ok") in ("ok", ""):
                    ppl.setdefault((r["model"], int(r["length"])), {})[int(r["seed"])] = \
                        float(r["value"])
    return ppl


def stats(v: dict):
    x = [v[s] for s in sorted(v)]
    return statistics.fmean(x), (statistics.stdev(x) if len(x) > 1 else float("nan")), len(x)


def below(ppl, a, b, lengths=PAST):
    """'a below b at the given lengths' by the README's rule."""
    gaps = []
    for n in lengths:
        if (a, n) not in ppl or (b, n) not in ppl:
            return "untested (missing length)"
        ma, sa, na = stats(ppl[a, n])
        mb, sb, nb = stats(ppl[b, n])
        if na < 2 or nb < 2:
            return f"untested (n = {na} / {nb})"
        gaps.append((mb - ma, max(sa, sb)))
    if any(g <= 0 for g, _ in gaps):
        return "not reproduced"
    return "reproduced" if all(g > s for g, s in gaps) else "direction only"


def weaker(*verdicts):
    order = ["reproduced", "direction only", "not reproduced"]
    if any(v.startswith("untested") for v in verdicts):
        return next(v for v in verdicts if v.startswith("untested"))
    return max(verdicts, key=order.index)


def main(paths) -> int:
    ppl = load(paths)
    # Table 3's and Fig. 7's columns (Table B's alpha sweep has seed 0 only)
    models = [m for m in MULT + ["ALiBi", "Ours", "head_only", "tail_only"]
              if any(k == m for k, _ in ppl)]
    lengths = sorted({n for _, n in ppl})
    rows = []
    for m in models:
        for n in lengths:
            if (m, n) in ppl:
                mu, sd, k = stats(ppl[m, n])
                rows.append({"model": m, "length": n, "mean": round(mu, 3),
                             "std": round(sd, 3), "n": k,
                             **{f"seed{s}": round(v, 3) for s, v in ppl[m, n].items()}})
    write_csv_atomic(rows, os.path.join(HERE, "lm_seeds.csv"))
    show = [T] + PAST
    lines = ["Test perplexity, mean ± sample std over seeds (n per cell in lm_seeds.csv).", "",
             "| model | " + " | ".join(f"{n // T}x ({n})" for n in show) + " |",
             "|---" * (len(show) + 1) + "|"]
    for m in models:
        cells = []
        for n in show:
            if (m, n) in ppl:
                mu, sd, _ = stats(ppl[m, n])
                cells.append(f"{mu:.2f} ± {sd:.2f}")
            else:
                cells.append("•")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    v = {}
    for b in MULT:
        v[f"Ours below {b} (2x..8x)"] = below(ppl, "Ours", b,
                                             [n for n in PAST if (b, n) in ppl])
    for b in MULT + ["Ours"]:
        v[f"ALiBi below {b} (2x..8x)"] = below(ppl, "ALiBi", b,
                                              [n for n in PAST if (b, n) in ppl])
    for w in ("Ours", "head_only", "tail_only"):
        v[f"{w} below RoPE and RoPE+PI (2x..8x)"] = weaker(below(ppl, w, "RoPE"),
                                                         below(ppl, w, "RoPE+PI"))
    v["Fig. 7: head_tail (Ours) best"] = weaker(below(ppl, "Ours", "head_only"),
                                                below(ppl, "Ours", "tail_only"))
    v["Fig. 7: head_only below tail_only"] = below(ppl, "head_only", "tail_only")
    mr, _, _ = stats(ppl["RoPE", T])
    for r in RANDPE:
        mu, _, k = stats(ppl[r, T])
        v[f"{r} hurts the seen length (1x above RoPE)"] = (
            f"untested (n = {k})" if k < 2 else "reproduced" if mu > SEEN_FACTOR * mr else
            "direction only" if mu > mr else "not reproduced")
    m1, s1, k = stats(ppl["Ours", T])
    m8, s8, _ = stats(ppl["Ours", 8 * T])
    v["Table 3: Ours at 8x below Ours at 1x"] = (
        f"untested (n = {k})" if k < 2 else "not reproduced" if m8 >= m1 else "reproduced" if m1 - m8 > max(s1, s8) else
        "direction only")
    lines += ["", "| claim | verdict |", "|---|---|"] + [f"| {k} | {x} |" for k, x in v.items()]
    write_text_atomic("\n".join(lines) + "\n", os.path.join(HERE, "lm_seeds.md"))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
