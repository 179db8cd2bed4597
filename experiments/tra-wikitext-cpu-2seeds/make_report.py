"""Table 2 / Fig. 4 of the TRA paper's App. B over two seeds: the committed seed-0 rows of
results/tra-wikitext-cpu/results.csv (trained at 5feb2d5) and this folder's seed-1 rows
(results-s1.csv, from `lengen reproduce tra-wikitext --scale cpu --seeds 1 --workers 1
--threads 1 --models ...`), through the recipe's own report code. Models with only seed 0 show
n = 1. Run from the repository root: python experiments/tra-wikitext-cpu-2seeds/make_report.py"""
from __future__ import annotations

import os

import pandas as pd

from lengen.recipes.tra_wikitext import MODELS, write_report

HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "results", "tra-wikitext-cpu-2seeds")   # the results folder this script reads and writes


def rows_of(path: str) -> list[dict]:
    df = pd.read_csv(path)
    df = df[df["status"] == "ok"]
    return [{k: v for k, v in r.items() if not (isinstance(v, float) and v != v)}
            for r in df.to_dict("records")]


if __name__ == "__main__":
    s0 = rows_of(os.path.join(HERE, "..", "tra-wikitext-cpu", "results.csv"))
    s1 = rows_of(os.path.join(HERE, "results-s1.csv"))
    write_report(s0 + s1, HERE, scale="cpu", models=list(MODELS), seeds=[0, 1],
                 data_caption="the offline KJV corpus (a stand-in for WikiText-103), "
                              "2,048-id BPE, test split")
