"""The lr axis of the Fig. 3 search (README, "The lr axis"): FIRE at lr 3e-3 against KerpleLog
at lr 1e-3, by the rule written before the runs, from ``summary.csv`` (run ``collect.py
--summary`` first).

    python experiments/addition-fig3-search/lr_axis.py

Writes ``lr_axis.csv``: one row per reading of the rule (``paired``: the seeds on which both
fit; ``search``: every fitted run of each PE's budget), with n, the fitted seeds, the OOD means
and sample stds, and the verdict.
"""
from __future__ import annotations

import os

import pandas as pd

HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "results", "addition-fig3-search")   # the results folder this script reads and writes
FIRE_SEEDS = (0, 3)            # the committed FIRE runs the rule names
BUDGET = dict(steps=8000, batch=128, device="cpu")


def verdict(a: pd.Series, b: pd.Series) -> tuple[str, float, float]:
    """FIRE's OOD EM ``a`` against KerpleLog's ``b`` (fitted runs): the rule's verdict, the
    difference of means and the larger sample std."""
    if len(a) < 2 or len(b) < 2:
        return "untested", float("nan"), float("nan")
    diff, std = a.mean() - b.mean(), max(a.std(ddof=1), b.std(ddof=1))
    if diff > std:
        return "reproduced", diff, std
    return ("direction only" if diff > 0 else "not reproduced"), diff, std


def main() -> pd.DataFrame:
    s = pd.read_csv(os.path.join(HERE, "summary.csv"))
    s = s[(s.steps == BUDGET["steps"]) & (s.batch == BUDGET["batch"])
          & (s.device == BUDGET["device"]) & s.finished.astype(bool)]
    fire = s[(s.setting == "fire") & (s.lr == 3e-3) & s.seed.isin(FIRE_SEEDS)].set_index("seed")
    kerple = s[(s.setting == "kerple_log") & (s.lr == 1e-3)].set_index("seed")
    rows = []
    both = sorted(set(fire.index[fire.fitted == "yes"]) & set(kerple.index[kerple.fitted == "yes"]))
    v, diff, std = verdict(fire.em_11_20.loc[both], kerple.em_11_20.loc[both])
    rows.append(dict(reading="paired", seeds=" ".join(map(str, both)), n=len(both),
                     fire_mean=fire.em_11_20.loc[both].mean(), fire_std=fire.em_11_20.loc[both].std(),
                     kerple_mean=kerple.em_11_20.loc[both].mean(),
                     kerple_std=kerple.em_11_20.loc[both].std(), diff=diff, larger_std=std,
                     verdict=v))
    fa, ka = fire[fire.fitted == "yes"], kerple[kerple.fitted == "yes"]
    v, diff, std = verdict(fa.em_11_20, ka.em_11_20)
    rows.append(dict(reading="search", seeds=f"FIRE {' '.join(map(str, fa.index))}; KerpleLog "
                     f"{' '.join(map(str, ka.index))}", n=min(len(fa), len(ka)),
                     fire_mean=fa.em_11_20.mean(), fire_std=fa.em_11_20.std(),
                     kerple_mean=ka.em_11_20.mean(), kerple_std=ka.em_11_20.std(), diff=diff,
                     larger_std=std, verdict=v))
    out = pd.DataFrame(rows).round(2)
    out.to_csv(os.path.join(HERE, "lr_axis.csv"), index=False)
    return out


if __name__ == "__main__":
    print(main().to_string())
