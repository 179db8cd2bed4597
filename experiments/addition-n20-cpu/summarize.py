"""The N = 20 runs against the same seeds at N = 10, by the rule in README.md.

    python experiments/addition-n20-cpu/summarize.py

Reads ``runs.jsonl`` (this folder: the N = 20 runs of ``run.py``) and the N = 10 runs of the
Fig. 3 search (``../addition-fig3-search/search-cpu.jsonl``: FIRE at 8,000 x 128, lr 3e-3, the
same seeds), and writes ``summary.csv`` (one row per run: N, seed, mean EM on 1..N and on
N/2+1..N, both readings, the extension past N, mean EM on N+1..2N) and ``verdicts.csv`` (the
rule's verdict per reading).
"""
from __future__ import annotations

import json
import os

import pandas as pd

HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "results", "addition-n20-cpu")   # the results folder this script reads and writes
SEEDS = (0, 3)
FIT, EXTEND = 95.0, 90.0


def extension(em: dict, N: int) -> int:
    """The largest E with EM >= 90 % at every length N+1..N+E (0 when EM at N+1 is below)."""
    e = 0
    while f"len={N + e + 1}" in em and em[f"len={N + e + 1}"] >= EXTEND:
        e += 1
    return e


def row(rec: dict, N: int) -> dict:
    em = rec["em"]
    mean = lambda lo, hi: sum(em[f"len={k}"] for k in range(lo, hi + 1)) / (hi - lo + 1)  # noqa
    top = max(int(k.split("=")[1]) for k in em)
    return dict(N=N, seed=rec["seed"], minutes=rec.get("minutes"), em_1_N=round(mean(1, N), 2),
                em_half_N=round(mean(N // 2 + 1, N), 2),
                fits=mean(1, N) >= FIT, learns=mean(N // 2 + 1, N) >= FIT,
                extension=extension(em, N), ood=round(mean(N + 1, min(2 * N, top)), 2))


def verdict(s: pd.DataFrame, reading: str) -> dict:
    n20 = s[(s.N == 20) & s[reading]].set_index("seed")
    n10 = s[s.N == 10].set_index("seed")
    out = dict(reading=reading, passing_N20=" ".join(map(str, n20.index)), n=len(n20))
    if len(n20) < 2:
        return dict(out, verdict="untested")
    e20, e10 = n20.extension, n10.extension.loc[n20.index]
    out.update(ext_N10=e10.mean(), ext_N20=e20.mean(), ood_N10=n10.ood.loc[n20.index].mean(),
               ood_N20=n20.ood.mean())
    if (e20 > e10).all():
        return dict(out, verdict="reproduced")
    return dict(out, verdict="direction only" if e20.mean() > e10.mean() else "not reproduced")


def main() -> None:
    rows = []
    with open(os.path.join(HERE, "..", "addition-fig3-search", "search-cpu.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if (r["setting"] == "fire" and r["seed"] in SEEDS and r["lr"] == 0.003
                    and r["steps"] == 8000 and r["batch"] == 128):
                rows.append(row(r, 10))
    with open(os.path.join(HERE, "runs.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r["status"] == "done":
                rows.append(row(r, r["N"]))
    s = pd.DataFrame(rows).sort_values(["N", "seed"])
    s.to_csv(os.path.join(HERE, "summary.csv"), index=False)
    v = pd.DataFrame([verdict(s, "fits"), verdict(s, "learns")]).round(2)
    v.to_csv(os.path.join(HERE, "verdicts.csv"), index=False)
    print(s.to_string(index=False))
    print(v.to_string(index=False))


if __name__ == "__main__":
    main()
