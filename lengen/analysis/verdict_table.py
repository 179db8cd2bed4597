"""results/VERDICTS.md from results/claims.yaml: every claim of the four papers lengen addresses,
each judged from committed csv rows by one rule of :mod:`lengen.analysis.verdicts` (issue 54).

    python -m lengen.analysis.verdict_table --write results/VERDICTS.md   # regenerate
    python -m lengen.analysis.verdict_table --check results/VERDICTS.md   # exit 1 if stale

``results/claims.yaml`` is data, not code: per claim the paper, figure / table, the published
numbers, the rule, and one or more *readings* (a folder's runs). A reading names, per arm, the
csv file(s), a pandas query selecting the arm's rows, the value column, the fit bar (an
expression over the same or other rows of the same run; ``fit.where`` must keep the arm's own
filter) or ``no_fit_bar`` with the reason the task has none, and the budget as numbers (a literal
``STEPS [steps] [x BATCH] [, lr LR] [(source)]`` or a column of another file; where the arm's
rows have ``steps`` / ``batch`` / ``lr`` columns they give the numbers, and a literal that
disagrees with them is an error). A reading may state ``lr_per_arm`` (why each arm runs at its
own lr). Bad data is an error naming the claim (id/folder/label) and the file (and the seed
where one is at fault), never a verdict: a NaN seed or a NaN value on a run that counts, two
rows for one seed and length of a pivot, ``agg: mean`` over rows of more than one run (``run:``
names the run column), a ``fit.where`` without the arm's own filter, a seed, pivot or budget
join key that is not a column of its csv (the error lists the file's columns). Two rows for one
seed under ``agg: one`` (the default) are not an error: ``agg: one`` makes every selected row
(after a pivot, every seed's row) one run, unaveraged, so they are two runs on one seed, and the
rule's own condition "one row per arm and seed" (:mod:`lengen.analysis.verdicts`) gives the
verdict *untested* with that reason. The first reading marked ``current`` gives the claim's
verdict; the others are listed as superseded, with the verdict the same rule gives them. ``registration`` says whether
the rule was committed before the runs (``pre-registered``, checked against git by
:mod:`lengen.analysis.registration`) or not (``exploratory``).
"""
from __future__ import annotations

import argparse
import math
import os
import re
import sys

import pandas as pd
import yaml

from lengen.analysis.verdicts import (PAIRED_GAP, PASS_COUNT, PASS_COUNT_V1, RULES, SINGLE_ARM,
                                      Budget, Run, Verdict, judge_pair, judge_pass, judge_single)

RESULTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "results")
KEYS = {"id", "paper", "where", "claim", "published", "rule", "sign", "op", "threshold",
        "among", "metric", "readings", "note"}
READING_KEYS = {"folder", "current", "arms", "seeds_chosen_by", "registration", "rule_file",
                "rule_commit", "superseded_note", "note", "lr_per_arm", "registration_note"}
ARM_KEYS = {"label", "file", "select", "value", "agg", "fit", "budget", "seed", "scale", "pivot",
            "no_fit_bar", "run"}
#: a claim's ``rule`` -> the versioned rule (an unversioned name is the current version)
RULE_NAMES = {"paired-gap": PAIRED_GAP, "pass-count": PASS_COUNT, "single-arm": SINGLE_ARM,
              PAIRED_GAP: PAIRED_GAP, PASS_COUNT: PASS_COUNT, PASS_COUNT_V1: PASS_COUNT_V1,
              SINGLE_ARM: SINGLE_ARM}


class ClaimError(ValueError):
    pass


def _unknown(d: dict, allowed: set, where: str):
    extra = set(d) - allowed
    if extra:
        raise ClaimError(f"{where}: unknown key(s) {sorted(extra)}; valid: {sorted(allowed)}")


def _read(name: str, root: str) -> pd.DataFrame:
    path = os.path.join(root, name)
    return pd.read_json(path, lines=True) if name.endswith(".jsonl") else pd.read_csv(path)


def _frame(files, root: str) -> pd.DataFrame:
    files = [files] if isinstance(files, str) else list(files)
    return pd.concat([_read(f, root) for f in files], ignore_index=True)


def _names(files) -> str:
    return files if isinstance(files, str) else " + ".join(files)


def _need_columns(df: pd.DataFrame, columns, files, where: str, what: str) -> None:
    """Columns a claim names as keys (seed, pivot, join) must be in its csv: a missing one is an
    error naming the claim (``where``: id/folder/label), the file and the columns it has."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ClaimError(f"{where}: {what} column(s) {', '.join(map(repr, missing))} not in "
                         f"{_names(files)} (its columns: "
                         f"{', '.join(sorted(map(str, df.columns)))})")


def _values(rows: pd.DataFrame, value: str) -> pd.Series:
    return rows[value] if value in rows.columns else rows.eval(value)


def _per_seed(rows: pd.DataFrame, value: str, agg: str, seed: str, where: str,
              run: str | None = None) -> dict:
    """seed -> list of values (agg 'one': one per row, so several rows on one seed stay several
    runs, which the rule's condition "one row per arm and seed" judges *untested*; agg 'mean':
    the mean over the rows of ONE run, ``run`` naming the column that identifies it; rows of two
    runs on one seed are an error, never averaged)."""
    if rows.empty:
        raise ClaimError(f"{where}: no rows")
    if agg not in ("one", "mean"):
        raise ClaimError(f"{where}: agg must be 'one' or 'mean', got {agg!r}")
    if seed not in rows.columns:
        raise ClaimError(f"{where}: no seed column {seed!r} (columns: {sorted(rows.columns)})")
    if rows[seed].isna().any():
        raise ClaimError(f"{where}: {int(rows[seed].isna().sum())} row(s) with a NaN seed")
    g = pd.DataFrame({"seed": rows[seed].values,
                      "v": pd.to_numeric(_values(rows, value)).astype(float).values})
    if agg == "mean":
        if not run or run not in rows.columns:
            raise ClaimError(f"{where}: agg 'mean' needs run: the column naming each run (so "
                             f"that two runs on one seed are refused, not averaged), got {run!r}")
        g["run"] = rows[run].values
    out = {}
    for s, part in g.groupby("seed", sort=True):
        if agg == "one":
            out[s] = part.v.tolist()
        else:
            if part.run.nunique() > 1:
                raise ClaimError(f"{where}: seed {s} has {part.run.nunique()} runs "
                                 f"({sorted(map(str, part.run.unique()))}): agg 'mean' averages "
                                 "the rows of one run, never several runs")
            out[s] = [float(part.v.mean())]
    return out


_OPS = {">=": lambda x, t: x >= t, ">": lambda x, t: x > t, "<=": lambda x, t: x <= t,
        "<": lambda x, t: x < t}
FIT_KEYS = {"where", "value", "agg", "op", "bar"}


def _pivot(df: pd.DataFrame, spec: dict, seed: str) -> pd.DataFrame:
    """Long rows (one per length) -> one row per seed with columns ``L<length>``. Two rows for
    one seed and length are an error (never the first of them)."""
    dup = df.duplicated([seed, spec["columns"]], keep=False)
    if dup.any():
        keys = sorted({(str(a), str(b)) for a, b in
                       df.loc[dup, [seed, spec["columns"]]].itertuples(index=False)})
        raise ClaimError(f"pivot: several rows for (seed, {spec['columns']}) {keys[:5]}: one "
                         "row per seed and column")
    p = df.pivot_table(index=seed, columns=spec["columns"], values=spec["values"],
                       aggfunc="first")
    p.columns = [f"L{c}" for c in p.columns]
    return p.reset_index()


BUDGET_COLUMNS = {"steps": "steps", "batch": "batch", "lr": "lr"}   # field -> csv column


def _fit_rows(df: pd.DataFrame, base: pd.DataFrame, fit: dict, seed: str, select: str | None,
              where: str) -> pd.DataFrame:
    """The rows ``fit.where`` selects from the arm's file: they must be this arm's runs. Every
    column the arm's ``select`` names that is constant over the arm's rows (its model, task,
    lr, ...) and that ``fit.where`` does not name must have the same value on the fit rows, so
    that a filter without the arm's own condition (which would read another arm's fit by seed)
    is refused."""
    rows = df.query(fit["where"])
    if rows.empty:
        raise ClaimError(f"{where}: fit.where {fit['where']!r} matches no row")
    named = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", fit["where"]))
    arm_filter = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", select or ""))
    for col in base.columns:
        if col not in arm_filter or col == seed or col in named or col not in rows.columns:
            continue
        vals = base[col].dropna().unique()
        if len(vals) == 1 and not (rows[col] == vals[0]).all():
            raise ClaimError(f"{where}: fit.where {fit['where']!r} selects rows with "
                             f"{col} != {vals[0]!r}, the arm's {col}: add the arm's filter")
    return rows


def _budgets(arm: dict, base: pd.DataFrame, seed: str, seeds, root: str,
             where: str) -> dict:
    """seed -> :class:`Budget`. From the literal (``STEPS [steps] [x BATCH] [, lr LR]
    [(source)]``) or another file's column joined on a key, then from the arm's own ``steps``,
    ``batch`` and ``lr`` columns where it has them: a literal that disagrees with a column is an
    error; a field the literal leaves out is taken from the column."""
    budget = arm.get("budget", "")
    out = {}
    if isinstance(budget, dict):        # steps from a column of another file, joined on a key
        need = {"file", "on", "column"}
        if set(budget) - (need | {"unit"}) or not need <= set(budget):
            raise ClaimError(f"{where}: budget must be a literal or a mapping with keys file, on, "
                             f"column (and unit), got {budget!r}")
        _need_columns(base, [budget["on"]], arm["file"], where, "budget join")
        other = _frame(budget["file"], root)
        _need_columns(other, [budget["on"], budget["column"]], budget["file"], where,
                      "budget join")
        other = other.groupby(budget["on"])[budget["column"]].max()
        keys = base.groupby(seed)[budget["on"]].apply(list)
        for s in seeds:
            steps = sorted({float(other[k]) for k in keys[s]})
            if len(steps) > 1:
                raise ClaimError(f"{where}: seed {s} has runs at {steps} steps in "
                                 f"{budget['file']}")
            n = int(steps[0]) if steps[0].is_integer() else steps[0]     # never 1e+06
            text = f"{n!r}{budget.get('unit', '')}"
            try:
                b = Budget.parse(text)
            except ValueError as e:
                raise ClaimError(f"{where}: budget unit: {e}") from None
            out[s] = Budget(b.steps, b.batch, b.lr, f"{budget['file']}: {budget['column']}")
    else:
        try:
            b = Budget.parse(budget) if str(budget).strip() else Budget()
        except ValueError as e:
            raise ClaimError(f"{where}: {e}") from None
        out = {s: b for s in seeds}
    for field, col in BUDGET_COLUMNS.items():
        if col not in base.columns:
            continue
        per_seed = base.groupby(seed)[col].apply(lambda x: sorted(set(x.dropna().astype(float))))
        for s in seeds:
            vals = per_seed.get(s, [])
            if len(vals) > 1:
                raise ClaimError(f"{where}: seed {s} has rows at {col} {vals} in {arm['file']}")
            if not vals:
                continue
            stated = getattr(out[s], field)
            if stated is not None and stated != vals[0]:
                raise ClaimError(f"{where}: the budget says {field} {stated:g} but {arm['file']} "
                                 f"has {col} {vals[0]:g} for seed {s}")
            out[s] = Budget(**{**{k: getattr(out[s], k) for k in Budget.FIELDS},
                               field: vals[0]}, source=out[s].source)
    return out


def arm_runs(arm: dict, root: str = RESULTS, where: str = "arm") -> list[Run]:
    """The runs of one arm: one :class:`Run` per selected csv row (after a ``pivot``, per
    seed; ``agg: mean``: per run, its rows averaged). Under ``agg: one`` two rows on one seed
    are two runs (the rule then gives *untested*), not an error."""
    _unknown(arm, ARM_KEYS, where)
    df = _frame(arm["file"], root)
    seed = arm.get("seed", "seed")
    sel = arm.get("select")
    base = df.query(sel) if sel else df
    if base.empty:
        raise ClaimError(f"{where}: select {sel!r} matches no row of {arm['file']}")
    long = base
    if "pivot" in arm:
        spec = arm["pivot"]
        if not isinstance(spec, dict) or set(spec) != {"columns", "values"}:
            raise ClaimError(f"{where}: pivot must be a mapping with keys columns and values, "
                             f"got {spec!r}")
        _need_columns(base, [seed, spec["columns"], spec["values"]], arm["file"], where,
                      "pivot")
        try:
            base = _pivot(base, arm["pivot"], seed)
        except ClaimError as e:
            raise ClaimError(f"{where}: {arm['file']}: {e}") from None
    else:
        _need_columns(base, [seed], arm["file"], where, "seed")
    agg = arm.get("agg", "one")
    in_file = f"{where}: {_names(arm['file'])}"          # errors about the values name the file
    values = _per_seed(base, arm["value"], agg, seed, in_file, arm.get("run"))
    fit = arm.get("fit")
    if fit is None and not arm.get("no_fit_bar"):
        raise ClaimError(f"{where}: no fit bar: give fit (value, bar) or no_fit_bar with the "
                         "reason the task has none")
    if fit is not None and arm.get("no_fit_bar"):
        raise ClaimError(f"{where}: fit and no_fit_bar both given")
    fitted: dict = {}
    if fit is not None:
        if not isinstance(fit, dict) or set(fit) - FIT_KEYS or not {"value", "bar"} <= set(fit):
            raise ClaimError(f"{where}: fit must be a mapping with keys value and bar (and "
                             f"where, agg, op), got {fit!r}")
        # fit.where selects the run's fit rows from the whole file (e.g. its IID split)
        if "pivot" in arm and fit.get("where"):
            raise ClaimError(f"{where}: fit.where cannot be used with pivot")
        rows = _fit_rows(df, base, fit, seed, sel, where) if fit.get("where") else base
        fv = _per_seed(rows, fit["value"], fit.get("agg", agg), seed, in_file + " (fit)",
                       arm.get("run"))
        op = _OPS[fit.get("op", ">=")]
        fitted = {s: [op(x, float(fit["bar"])) for x in xs] for s, xs in fv.items()}
    bud = _budgets(arm, long, seed, values, root, where)
    scale = float(arm.get("scale", 1.0))
    runs = []
    for s, xs in values.items():
        if fit is None:
            fs = [None] * len(xs)
        else:
            fs = fitted.get(s)
            if fs is None or len(fs) != len(xs):
                raise ClaimError(f"{where}: seed {s} has {len(xs)} value row(s) and "
                                 f"{0 if fs is None else len(fs)} fit row(s) in {arm['file']}: "
                                 "one fit per run")
        for x, f in zip(xs, fs):
            key = int(s) if isinstance(s, (int, float)) and float(s).is_integer() else s
            if math.isnan(x) and f is not False:
                raise ClaimError(f"{where}: {arm['file']}, seed {key}: value {arm['value']!r} "
                                 "is NaN on a run that counts (fitted, or no fit bar)")
            runs.append(Run(key, x * scale, f, bud[s]))
    return runs


def judge_reading(claim: dict, reading: dict, root: str = RESULTS) -> tuple[Verdict, dict]:
    """The rule's verdict on one reading, and each arm's runs."""
    _unknown(reading, READING_KEYS, f"{claim['id']}: reading")
    rule = RULE_NAMES.get(claim["rule"])
    if rule is None:
        raise ClaimError(f"{claim['id']}: rule must be one of {sorted(RULE_NAMES)}, "
                         f"got {claim['rule']!r}")
    arms = reading["arms"]
    where = f"{claim['id']}/{reading['folder']}"
    runs = {a["label"]: arm_runs(a, root, f"{where}/{a['label']}") for a in arms}
    labels = [a["label"] for a in arms]
    chosen = reading.get("seeds_chosen_by")
    no_bar = {a["label"]: a["no_fit_bar"] for a in arms if a.get("no_fit_bar")}
    lr_per_arm = reading.get("lr_per_arm")
    try:
        if rule == PAIRED_GAP:
            v = judge_pair(runs[labels[0]], runs[labels[1]], int(claim.get("sign", 1)),
                           names=tuple(labels), seeds_chosen_by=chosen, no_fit_bar=no_bar,
                           lr_per_arm=lr_per_arm)
        elif rule in (PASS_COUNT, PASS_COUNT_V1):
            v = judge_pass(runs[labels[0]], runs[labels[1]], names=tuple(labels),
                           seeds_chosen_by=chosen, version=rule, lr_per_arm=lr_per_arm)
        else:
            v = judge_single(runs[labels[0]], claim.get("op", ">="), float(claim["threshold"]),
                             among=claim.get("among", "fitted"), name=labels[0],
                             seeds_chosen_by=chosen, no_fit_bar=no_bar.get(labels[0]))
    except ValueError as e:
        raise ClaimError(f"{where}: {e}") from None
    return v, runs


DESCRIPTIVE_KEYS = {"id", "paper", "where", "claim", "folder", "why"}


class Claims(list):
    """The claims (a list of dicts) and, as ``.descriptive``, the claims addressed without a
    verdict (no seeds to pair or count: formulas only, or one run per arm)."""
    descriptive: list


def load(path: str) -> Claims:
    with open(path) as f:
        doc = yaml.safe_load(f)
    _unknown(doc, {"claims", "descriptive"}, path)
    claims = Claims(doc["claims"])
    claims.descriptive = list(doc.get("descriptive") or [])
    for d in claims.descriptive:
        _unknown(d, DESCRIPTIVE_KEYS, f"descriptive {d.get('id')}")
        missing = DESCRIPTIVE_KEYS - set(d)
        if missing:
            raise ClaimError(f"descriptive {d.get('id')}: missing key(s) {sorted(missing)}")
    ids = {d["id"] for d in claims.descriptive}
    for c in claims:
        _unknown(c, KEYS, f"claim {c.get('id')}")
        if c["id"] in ids:
            raise ClaimError(f"claim id {c['id']!r} twice")
        ids.add(c["id"])
        if c["rule"] not in RULE_NAMES:
            raise ClaimError(f"{c['id']}: rule must be one of {sorted(RULE_NAMES)}, "
                             f"got {c['rule']!r}")
        current = [r for r in c["readings"] if r.get("current")]
        if len(current) != 1:
            raise ClaimError(f"{c['id']}: exactly one reading must be current, "
                             f"{len(current)} are")
        for r in c["readings"]:
            reg = r.get("registration", "exploratory")
            if reg not in ("pre-registered", "exploratory"):
                raise ClaimError(f"{c['id']}: registration must be 'pre-registered' or "
                                 f"'exploratory', got {reg!r}")
            if reg == "pre-registered" and not (r.get("rule_commit") and r.get("rule_file")):
                raise ClaimError(f"{c['id']}/{r['folder']}: pre-registered needs rule_file "
                                 "and rule_commit")
    return claims


def _num(x) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.1f}" if abs(x) < 1000 else f"{x:,.0f}"


def _ours(v: Verdict, runs: dict) -> str:
    parts = []
    for label, rs in runs.items():
        if v.seeds and label in v.means:
            parts.append(f"{label} {_num(v.means[label])} ± {_num(v.stds[label])}")
        else:
            shown = ", ".join(f"s{r.seed}: {_num(r.value)}{'' if r.fitted is not False else '†'}"
                              for r in sorted(rs, key=lambda r: str(r.seed)))
            parts.append(f"{label} [{shown}]")
    return "; ".join(parts)


def _counts(v: Verdict, runs: dict) -> str:
    return "; ".join(f"{k} {v.n[k]} runs, no fit bar" if any(r.fitted is None for r in runs[k])
                     else f"{k} {v.fitted[k]}/{v.n[k]}" for k in v.n)


def _cell(s) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ").strip()


def render(claims: list[dict], root: str = RESULTS) -> str:
    out = ["# Verdicts", "",
           "Generated by `python -m lengen.analysis.verdict_table --write results/VERDICTS.md` "
           "from `results/claims.yaml` and the committed csv files; do not edit by hand "
           "(`tests/test_verdict_table.py` regenerates it and fails on any difference). Every "
           "verdict wording elsewhere in lengen quotes or links this table.", "",
           "Columns: **n fitted/run** per arm (fitted by the reading's fit bar); **ours**: mean ± "
           "sample std over the seeds the verdict stands on, or every run's value when no verdict "
           "above *untested* is possible († = did not fit); **registration**: *pre-registered* "
           "when the rule was committed before the first data it governs (checked from git by "
           "`lengen.analysis.registration`), else *exploratory*.", "",
           "## Rules", ""]
    for name, text in RULES.items():
        out.append(f"- **{name}**: {text}")
    out += ["", "## Claims", "",
            "| id | paper | where | claim | folder | n fitted/run | ours | published | rule | "
            "verdict | why | registration |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    superseded = []
    for c in claims:
        for r in c["readings"]:
            v, runs = judge_reading(c, r, root)
            row = [c["id"], c["paper"], c["where"], c["claim"], f"`{r['folder']}/`",
                   _counts(v, runs), _ours(v, runs), c.get("published", ""), v.rule,
                   f"*{v.verdict}*", v.reason + (f" ({r['note']})" if r.get("note") else ""),
                   r.get("registration", "exploratory")
                   + (f" ({r['registration_note']})" if r.get("registration_note") else "")]
            if r.get("current"):
                out.append("| " + " | ".join(_cell(x) for x in row) + " |")
            else:
                superseded.append((c, r, v, runs))
    out += ["", "## Superseded readings", "",
            "Another folder's runs on the same claim, judged by the same rule; the claim's verdict "
            "is the current reading's above.", "",
            "| id | folder | n fitted/run | ours | verdict by the rule | why | superseded because |",
            "|---|---|---|---|---|---|---|"]
    for c, r, v, runs in superseded:
        out.append("| " + " | ".join(_cell(x) for x in (
            c["id"], f"`{r['folder']}/`", _counts(v, runs), _ours(v, runs), f"*{v.verdict}*",
            v.reason, r.get("superseded_note", ""))) + " |")
    descriptive = getattr(claims, "descriptive", [])
    if descriptive:
        out += ["", "## Addressed without a verdict", "",
                "Claims a results folder addresses where no rule above can give a verdict; the "
                "folder describes what it measured, and no verdict word elsewhere stands for "
                "them.", "",
                "| id | paper | where | claim | folder | why no verdict |", "|---|---|---|---|---|---|"]
        for d in descriptive:
            out.append("| " + " | ".join(_cell(x) for x in (
                d["id"], d["paper"], d["where"], d["claim"], f"`{d['folder']}/`", d["why"]))
                + " |")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m lengen.analysis.verdict_table")
    p.add_argument("--claims", default=os.path.join(RESULTS, "claims.yaml"))
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--write", metavar="PATH")
    g.add_argument("--check", metavar="PATH")
    a = p.parse_args(argv)
    text = render(load(a.claims))
    if a.write:
        with open(a.write, "w") as f:
            f.write(text)
        return 0
    with open(a.check) as f:
        if f.read() != text:
            print(f"{a.check} is stale: rerun with --write", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
