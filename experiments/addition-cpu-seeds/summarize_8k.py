"""Randomized positions and random spaces at the Fig. 3 search's budget (8,000 steps x batch 128),
and hints and the reversed format at the same budget ("Hints and the reversed format at 8,000 x
128"), judged by the rules in README.md, each written before its runs.

    PYTHONPATH=. python experiments/addition-cpu-seeds/summarize_8k.py

Reads FIRE's runs at that budget from ``../addition-fig3-search/search-cpu.jsonl`` (seeds 0 and 3)
and the ablation runs, and FIRE's seed 5, from ``probes-8k.jsonl`` (this folder: the probe
script's output lines). Randomized positions are judged over seeds 0 and 3 (the first rule),
random spaces over 0, 3 and 5 (its continuation, "Random spaces, continued").
Writes ``runs-8k.csv`` (one row per run) and ``verdicts-8k.csv`` (one row per claim and reading).
With ``dip.jsonl`` here (``dip_eval.py``'s output), also ``dip.csv``: the short-length dip test
("The dip, tested on the trained weights"), one row per run that learns addition, and its
verdict.
"""
from __future__ import annotations

import json
import os
import sys

import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from summarize import verdict  # noqa: E402  (the same verdict rule as the 5,000 x 32 table)

HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "results", "addition-cpu-seeds")   # the results folder this script reads and writes
SEARCH = os.path.join(HERE, "..", "addition-fig3-search", "search-cpu.jsonl")
NEW = os.path.join(HERE, "probes-8k.jsonl")
DIP = os.path.join(HERE, "dip.jsonl")
PASS = 95.0
SEEDS = (0, 3, 5)
READINGS = {"fits": (1, 10), "learns": (6, 10)}   # name -> digits whose mean EM must pass
#: claim -> (base arm, other arm, kind, sign of the paper's effect on OOD EM of `other - base`)
CLAIMS = {"randomized positions help FIRE (Fig. 8)": ("fire", "fire-norand", "ood", -1),
          "random spaces hurt FIRE (Fig. 7)": ("fire", "fire-spaces", "ood", -1)}
#: claim -> the seeds its rule names
CLAIM_SEEDS = {"randomized positions help FIRE (Fig. 8)": (0, 3),
               "random spaces hurt FIRE (Fig. 7)": (0, 3, 5)}
#: "makes FIRE learn" claims (third rule, "Hints and the reversed format at 8,000 x 128"):
#: claim -> (base arm, ablated arm); judged over the seeds of (0, 3, 5) where the ablated arm
#: finished, >= 2 of them needed
LEARN_CLAIMS = {"hints make FIRE learn (Fig. 4)": ("fire", "fire-nohints"),
                "the reversed format makes FIRE learn (Fig. 5)": ("fire", "fire-standard")}


def read(path: str, settings) -> list[dict]:
    rows = []
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            if (r["setting"] in settings and r["seed"] in SEEDS and r["steps"] == 8000
                    and r["batch"] == 128 and r["status"] == "done"):
                rows.append(r)
    return rows


def per_run(rec: dict, source: str) -> dict:
    em = {int(k[4:]): v for k, v in rec["em"].items()}
    if sorted(em) != list(range(1, 21)):
        raise SystemExit(f"{rec['name']}: EM missing at some length 1..20")
    mean = lambda lo, hi: sum(em[d] for d in range(lo, hi + 1)) / (hi - lo + 1)  # noqa: E731
    row = {"run": rec["name"], "setting": rec["setting"], "seed": rec["seed"], "source": source,
           "minutes": rec["minutes"], "em_1": em[1], "em_1_10": mean(1, 10),
           "em_6_10": mean(6, 10), "ood": mean(11, 20)}
    for name, (lo, hi) in READINGS.items():
        row[name] = bool(mean(lo, hi) >= PASS)
    return row


def dip(runs: pd.DataFrame) -> pd.DataFrame | None:
    """The dip test over the runs of dip.jsonl that learn addition: mean EM over 1..5 digits
    with the evaluation's draw and with training's, the two checks, and the verdict (the same
    string on every row)."""
    if not os.path.exists(DIP):
        return None
    final_em = {}                                  # run name -> its final EM per length
    for path in (SEARCH, NEW):
        with open(path) as f:
            for line in f:
                rec = json.loads(line)
                final_em[rec["name"]] = rec.get("em") or {}
    rows = []
    with open(DIP) as f:
        for line in f:
            r = json.loads(line)
            name = os.path.basename(r["run"].rstrip("/"))
            run = runs[runs.run == name]
            if len(run) != 1:
                raise SystemExit(f"dip.jsonl run {name} is not in runs-8k.csv")
            run = run.iloc[0]
            if not run["learns"]:
                continue
            em = final_em[name]
            same_T = [s for s, t in r["T"].items() if t >= r["t_pad"]]
            rows.append(dict(run=name, setting=run["setting"], seed=run["seed"], t_pad=r["t_pad"],
                             eval_1_5=sum(r["eval"][f"len={d}"] for d in range(1, 6)) / 5,
                             train_1_5=sum(r["train"][f"len={d}"] for d in range(1, 6)) / 5,
                             eval_is_final_em=all(abs(r["eval"][s] - em[s]) < 1e-9 for s in em),
                             draws_agree_from_t_pad=all(r["train"][s] == r["eval"][s]
                                                        for s in same_T),
                             first_len_at_t_pad=min(int(s[4:]) for s in same_T)))
    out = pd.DataFrame(rows)
    if out.empty:
        v = "untested"
    elif not (out.eval_is_final_em.all() and out.draws_agree_from_t_pad.all()):
        v = "no verdict (a check failed)"
    elif ((out.train_1_5 >= PASS) & (out.train_1_5 > out.eval_1_5)).all():
        v = "explained"
    elif (out.train_1_5 > out.eval_1_5).all():
        v = "partly explained"
    else:
        v = "not explained"
    return out.assign(verdict=v)


def main() -> None:
    rows = [per_run(r, "addition-fig3-search") for r in read(SEARCH, {"fire"})]
    rows += [per_run(r, "this folder") for r in read(NEW, {"fire-norand", "fire-spaces", "fire",
                                                             "fire-nohints", "fire-standard"})]
    runs = pd.DataFrame(rows).sort_values(["setting", "seed"]).reset_index(drop=True)
    if runs.duplicated(["setting", "seed"]).any():
        raise SystemExit("a setting and seed appear twice")
    runs.to_csv(os.path.join(HERE, "runs-8k.csv"), index=False)
    verdicts = [dict(claim=c, **verdict(runs[runs.seed.isin(CLAIM_SEEDS[c])], *spec, reading,
                                        seeds=CLAIM_SEEDS[c]))
                for c, spec in CLAIMS.items() for reading in READINGS]
    for c, (base, other) in LEARN_CLAIMS.items():
        seeds = sorted(runs[runs.setting == other].seed)          # the finished ablated runs
        for reading in READINGS:
            v = verdict(runs[runs.seed.isin(seeds)], base, other, "learn", -1, reading,
                        seeds=seeds)
            if len(seeds) < 2:
                v["verdict"] = "untested"
            v["common_seeds"] = " ".join(map(str, seeds))
            verdicts.append(dict(claim=c, **v))
    pd.DataFrame(verdicts).to_csv(os.path.join(HERE, "verdicts-8k.csv"), index=False)
    dips = dip(runs)
    if dips is not None:
        dips.to_csv(os.path.join(HERE, "dip.csv"), index=False)
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(runs.drop(columns=["run"]).round(1).to_string(index=False))
        print(pd.DataFrame(verdicts)[["claim", "reading", "base_passed", "other_passed",
                                      "common_seeds", "verdict"]].to_string(index=False))
        if dips is not None:
            print(dips.round(1).to_string(index=False))


if __name__ == "__main__":
    main()
