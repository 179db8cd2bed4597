"""Judge a recipe folder's claims again from its committed rows, without training or the run
directories: the recipe's own report code (``lengen.recipes.addition.report``, whose verdicts
come from ``lengen.analysis.verdicts``' judge_* rules), then ``summarize.py``.

    PYTHONPATH=. python experiments/addition-cpu-recipe/rejudge.py [FOLDER]

FOLDER (default: results/addition-cpu-recipe/seeds0-4) holds ``results.csv`` (protocol A: every
row of the recipe's sweep) and ``reading_b/scores.csv`` (protocol B: the per-run scores of
``reading_b.py``; its error-analysis rows were not committed, so B's carry and one-wrong-digit
claims read untested here). Rewrites ``claims.md/.csv`` and ``errors_runs.csv`` of A,
``reading_b/claims.md/.csv`` of B, and ``verdicts.md/.csv``; each caption is the committed
``claims.md``'s (the run directories that gave its wall times are not committed).
"""
from __future__ import annotations

import math
import os
import sys

import pandas as pd

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from lengen.fileio import write_csv_atomic                      # noqa: E402
from lengen.recipes.addition import (SCALES, error_runs, max_test_length, run_scores,  # noqa: E402
                                     write_claims)
import summarize                                                 # noqa: E402

ROOT = os.path.dirname(os.path.dirname(HERE))


def _records(path: str) -> list[dict]:
    df = pd.read_csv(path)
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
            for r in df.to_dict("records")]


def _caption(folder: str) -> str:
    with open(os.path.join(folder, "claims.md")) as f:
        return f.read().split("\n\n")[1]


def main(folder: str = os.path.join(ROOT, "results", "addition-cpu-recipe", "seeds0-4"),
         scale: str = "cpu") -> None:
    rows = _records(os.path.join(folder, "results.csv"))
    scores = run_scores(rows, M=lambda N: max_test_length(scale, N))
    write_claims(rows, scores, folder, scale=scale, caption=_caption(folder))
    write_csv_atomic(error_runs(rows, scores, SCALES[scale]["N"]),
                     os.path.join(folder, "errors_runs.csv"))
    b = os.path.join(folder, "reading_b")
    if os.path.exists(os.path.join(b, "scores.csv")):
        scores_b = _records(os.path.join(b, "scores.csv"))
        write_claims([], scores_b, b, scale=scale, caption=_caption(b))
        summarize.main(folder)      # verdicts.md/.csv: A beside B (a part folder has no B)


if __name__ == "__main__":
    main(*sys.argv[1:])
