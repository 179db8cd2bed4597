"""Rand. RoPE's card rows (``../runs.csv``) beside the same command rerun on another CPU
(``runs.csv`` here), cell by cell: fitted seeds, the chosen rate, and the OOD mean over the fitted
seeds (the card's score). Writes ``compare.csv``.

    python results/bench-cpu/v2/rand-rope-replication/compare.py
"""
import csv
import os

HERE = os.path.dirname(os.path.abspath(__file__))
VARIANT = "Rand. RoPE"


def counted(path: str) -> dict[str, list[dict]]:
    """cell -> the counted rows of VARIANT in ``path``."""
    out: dict[str, list[dict]] = {}
    for r in csv.DictReader(open(path, newline="")):
        if r["variant"] == VARIANT and r["counted"] == "True":
            out.setdefault(r["cell"], []).append(r)
    return out


def summary(rows: list[dict]) -> tuple[int, str, str]:
    fitted = [r for r in rows if r["fitted"] == "True"]
    rate = ",".join(sorted({f"{float(r['lr']):g}" for r in rows}))
    ood = (f"{sum(float(r['ood']) for r in fitted) / len(fitted):.4f}" if fitted else "")
    return len(fitted), rate, ood


if __name__ == "__main__":
    card = counted(os.path.join(HERE, "..", "runs.csv"))
    rerun = counted(os.path.join(HERE, "runs.csv"))
    fields = ["cell", "seeds", "card_fitted", "rerun_fitted", "card_lr", "rerun_lr",
              "card_ood_mean", "rerun_ood_mean"]
    tmp = os.path.join(HERE, "compare.csv.tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(fields)
        for cell in card:
            assert len(card[cell]) == len(rerun[cell]) == 3, cell
            (ck, cl, co), (rk, rl, ro) = summary(card[cell]), summary(rerun[cell])
            w.writerow([cell, 3, ck, rk, cl, rl, co, ro])
    os.replace(tmp, os.path.join(HERE, "compare.csv"))
    print(open(os.path.join(HERE, "compare.csv")).read())
