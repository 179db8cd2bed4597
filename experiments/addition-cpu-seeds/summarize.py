"""Addition cpu scale, issue 27 item 2: every FIRE ablation on init seeds 0, 1, 2, judged by the
rule in README.md (written before the runs).

    PYTHONPATH=. python experiments/addition-cpu-seeds/summarize.py

Reads the final EM rows (``seq_acc`` at ``len=1..20``) and the error-analysis rows of
``results.csv`` (this folder: the runs made for it, concatenated from the recipe's outputs) and
of ``../addition-cpu/results.csv`` (the committed runs the rule first meant to reuse: seed 0 of
four arms and FIRE seed 1). Every one of those has a rerun here, and the rerun replaces it
unless the two agree within 5 points at every length (README: "The reuse check failed"). Writes
``runs.csv`` (one row per run and arm), ``verdicts.csv``, ``carry.csv``, ``reuse_check.csv``
and ``seeds.md``.
"""
from __future__ import annotations

import os

import pandas as pd

from lengen.analysis.tables import markdown_table
from lengen.recipes.addition import pooled

HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "results", "addition-cpu-seeds")   # the results folder this script reads and writes
OLD = os.path.join(HERE, "..", "addition-cpu", "results.csv")
NEW = os.path.join(HERE, "results.csv")
PASS = 95.0           # both readings' threshold, % EM
SEEDS = (0, 1, 2)
ARMS = ("fire", "fire-nohints", "fire-standard", "fire-norand", "fire-spaces")
#: committed runs of ../addition-cpu the rule first reused; each is checked against its rerun here
REUSED = ("fire-s0-d0", "fire-s1-d0", "fire-nohints-s0-d0", "fire-norand-s0-d0",
          "fire-spaces-s0-d0")
READINGS = {"fits": (1, 10), "learns": (6, 10)}   # name -> digits whose mean EM must pass
#: claim -> (base arm, other arm, kind, sign of the paper's effect on OOD EM of `other - base`)
CLAIMS = {"hints make FIRE learn (Fig. 4)": ("fire", "fire-nohints", "learn", None),
          "the reversed format makes FIRE learn (Fig. 5)": ("fire", "fire-standard", "learn", None),
          "randomized positions help FIRE (Fig. 8)": ("fire", "fire-norand", "ood", -1),
          "random spaces hurt FIRE (Fig. 7)": ("fire", "fire-spaces", "ood", -1)}
ERROR_METRICS = ("digit_acc_carry_in", "digit_acc_no_carry_in", "single_digit_error_share")


def em_by_length(path: str, runs=None) -> pd.DataFrame:
    r = pd.read_csv(path, low_memory=False)
    r = r[(r.metric == "seq_acc") & r.split.astype(str).str.startswith("len=")].copy()
    if runs is not None:
        r = r[r.run.isin(runs)]
    r["digits"] = r.split.str[4:].astype(int)
    r["em"] = 100 * r.value
    return r[["run", "setting", "seed", "digits", "em"]]


def reuse_check(old: pd.DataFrame, new: pd.DataFrame) -> pd.DataFrame:
    """Per reused run with a rerun here: the largest EM difference over 1..20 and whether it is
    within the rule's 5 points."""
    rows = []
    missing = sorted(set(REUSED) - set(new.run))
    if missing:       # the amendment reruns every one: never mix in an unchecked committed row
        raise SystemExit(f"no rerun here of {', '.join(missing)} (README: every reused row is "
                         f"run again)")
    for run in sorted(REUSED):
        a = old[old.run == run].set_index("digits").em
        b = new[new.run == run].set_index("digits").em
        if sorted(a.index) != list(range(1, 21)) or sorted(b.index) != list(range(1, 21)):
            raise SystemExit(f"{run}: EM missing at some length 1..20")
        d = float((a - b.reindex(a.index)).abs().max())
        rows.append({"run": run, "max_diff": d, "reproduces": d <= 5.0})
    return pd.DataFrame(rows, columns=["run", "max_diff", "reproduces"])


def load() -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the runs the table uses, the reuse check). A reused row is replaced by its rerun here
    when the check fails (README: "The reuse check failed, and what follows")."""
    old = em_by_length(OLD, REUSED).assign(source="addition-cpu")
    new = em_by_length(NEW).assign(source="this folder")
    for name, d in (("../addition-cpu", old), ("this folder", new)):
        dup = d.groupby(["run", "digits"]).size()
        if (dup > 1).any():
            raise SystemExit(f"{name}: a run appears twice in results.csv")
    check = reuse_check(old, new)
    replaced = set(check.run[~check.reproduces])
    use = pd.concat([old[~old.run.isin(replaced)], new[~new.run.isin(set(REUSED) - replaced)]],
                    ignore_index=True)
    want = [f"{arm}-s{seed}-d0" for arm in ARMS for seed in SEEDS]   # N = 10, data order 0
    return use[use.run.isin(want)], check


def per_run(em: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for (run, setting, seed, source), g in em.groupby(["run", "setting", "seed", "source"]):
        m = g.set_index("digits").em
        row = {"run": run, "setting": setting, "seed": int(seed), "source": source,
                   "em_1_10": m.loc[1:10].mean(), "em_6_10": m.loc[6:10].mean(),
                   "em_1": m.loc[1], "ood": m.loc[11:20].mean()}
        for name, (lo, hi) in READINGS.items():
            row[name] = bool(m.loc[lo:hi].mean() >= PASS)
        rows.append(row)
    return pd.DataFrame(rows).sort_values(["setting", "seed"]).reset_index(drop=True)


def verdict(runs: pd.DataFrame, base: str, other: str, kind: str, sign, reading: str,
            seeds=SEEDS) -> dict:
    b = runs[runs.setting == base].set_index("seed")
    o = runs[runs.setting == other].set_index("seed")
    nb, no = int(b[reading].sum()), int(o[reading].sum())
    out = {"reading": reading, "base_passed": nb, "other_passed": no, "n_seeds": len(seeds)}
    if kind == "learn":
        if nb == 0 and no == 0:
            v = "untested"
        elif nb >= 2 and no == 0:
            v = "reproduced"
        elif nb > no:
            v = "direction only"
        else:
            v = "not reproduced"
        return dict(out, verdict=v)
    both = [s for s in seeds if s in b.index and s in o.index and b.loc[s, reading]
            and o.loc[s, reading]]
    out.update(common_seeds=" ".join(map(str, both)), n_common=len(both))
    if len(both) < 2:
        return dict(out, verdict="untested")
    xb, xo = b.loc[both, "ood"], o.loc[both, "ood"]
    diff = xo.mean() - xb.mean()
    spread = max(xb.std(), xo.std())
    out.update(base_ood_mean=xb.mean(), base_ood_std=xb.std(), other_ood_mean=xo.mean(),
               other_ood_std=xo.std(), diff=diff, larger_std=spread)
    effect = sign * diff
    v = ("reproduced" if effect > spread else "direction only" if effect > 0
         else "not reproduced")
    return dict(out, verdict=v)


def carry(runs: pd.DataFrame, reading: str) -> dict:
    """Fig. 9 / C.10 over the `fire` runs (seeds 0-2, this commit) that pass the reading."""
    rows = []
    for path in (OLD, NEW):
        r = pd.read_csv(path, low_memory=False)
        r = r[r.metric.isin(ERROR_METRICS + ("seq_acc_generated",))]
        rows.append(r.assign(source="addition-cpu" if path == OLD else "this folder"))
    r = pd.concat(rows, ignore_index=True)
    ok = runs[(runs.setting == "fire") & runs.seed.isin(SEEDS) & runs[reading]]
    recs = []
    for _, run in ok.iterrows():
        recs += r[(r.run == run.run) & (r.source == run.source)].to_dict("records")
    names = set(ok.run)
    dc, ndc = pooled(recs, names, "digit_acc_carry_in")
    dn, ndn = pooled(recs, names, "digit_acc_no_carry_in")
    one, nw = pooled(recs, names, "single_digit_error_share")
    out = {"reading": reading, "runs": " ".join(sorted(names)), "digit_acc_carry_in": dc,
               "n_carry_in": ndc, "digit_acc_no_carry_in": dn, "n_no_carry_in": ndn,
               "single_digit_share": one, "n_wrong": nw}
    if dc is None or dn is None:
        return dict(out, holds="untested")
    ec, en = 100 - dc, 100 - dn
    return dict(out, err_carry_in=ec, err_no_carry_in=en,
                holds="yes" if max(ec, en) <= 2 * min(ec, en) else "no")


def f1(x) -> str:
    return "-" if x is None or pd.isna(x) else f"{x:.1f}"


def ms(v: dict, mean: str, std: str) -> str:
    return "-" if pd.isna(v.get(mean)) else f"{v[mean]:.1f} ± {v[std]:.1f}"


def main() -> None:
    em, check = load()
    check.to_csv(os.path.join(HERE, "reuse_check.csv"), index=False)
    runs = per_run(em)
    runs.to_csv(os.path.join(HERE, "runs.csv"), index=False)
    verdicts = [dict(claim=c, **verdict(runs, *spec, reading))
                for c, spec in CLAIMS.items() for reading in READINGS]
    pd.DataFrame(verdicts).to_csv(os.path.join(HERE, "verdicts.csv"), index=False)
    carries = [carry(runs, reading) for reading in READINGS]
    pd.DataFrame(carries).to_csv(os.path.join(HERE, "carry.csv"), index=False)

    grid = [["arm", "seed", "run from", "EM 1 digit", "EM 1..10", "EM 6..10", "fits", "learns",
             "OOD EM 11..20"]]
    for _, r in runs.iterrows():
        grid.append([r.setting, str(r.seed), r.source, f1(r.em_1), f1(r.em_1_10), f1(r.em_6_10),
                     "yes" if r.fits else "no", "yes" if r.learns else "no", f1(r.ood)])
    vgrid = [["claim", "reading", "passing seeds (FIRE / other arm)", "common seeds",
              "OOD FIRE", "OOD other arm", "verdict"]]
    for v in verdicts:
        vgrid.append([v["claim"], v["reading"], f"{v['base_passed']} / {v['other_passed']} of 3",
                      v.get("common_seeds", "-") or "-", ms(v, "base_ood_mean", "base_ood_std"),
                      ms(v, "other_ood_mean", "other_ood_std"), v["verdict"]])
    cgrid = [["reading", "runs", "digit error, carry in (n)", "no carry in (n)",
              "one wrong digit, % of wrong (n)", "within 2x"]]
    for c in carries:
        cgrid.append([c["reading"], c["runs"] or "-",
                      f"{f1(c.get('err_carry_in'))} ({c['n_carry_in']})",
                      f"{f1(c.get('err_no_carry_in'))} ({c['n_no_carry_in']})",
                      f"{f1(c['single_digit_share'])} ({c['n_wrong']})", c["holds"]])
    notes = [f"{r.run}: at most {r.max_diff:.1f} points apart over 1..20, "
             f"{'reproduces (committed row kept)' if r.reproduces else 'replaced by the rerun'}"
             for r in check.itertuples()]
    check_md = ("\n\n**Reuse check** (each committed row against its rerun here)\n\n"
                + "\n".join(f"- {n}" for n in notes)) if notes else ""
    with open(os.path.join(HERE, "seeds.md"), "w") as f:
        f.write("**Every run** (EM in %; fits = EM 1..10 >= 95, learns = EM 6..10 >= 95)\n\n"
                + markdown_table(grid) + "\n\n**Verdicts** (the rule in README.md; OOD means "
                "± sample std over the common passing seeds)\n\n" + markdown_table(vgrid)
                + "\n\n**Carry and one wrong digit** (the FIRE runs passing the reading; digit "
                "errors at 12 and 15 digits)\n\n" + markdown_table(cgrid)
                + check_md + "\n")
    with open(os.path.join(HERE, "seeds.md")) as f:
        print(f.read())


if __name__ == "__main__":
    main()
