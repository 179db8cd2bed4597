"""Verdicts on a paper's claim from runs on several seeds, by rules fixed before the runs.

The project's rule for a claim about a paper (README, "A claim about a paper needs fitted runs
and seeds"): a run that did not fit its training distribution says nothing about
generalization, so it is left out; arms are compared over the same seeds at the same budget,
never a best-of-n against one run; every verdict states n and how many runs passed. The three
rules below (:data:`RULES`, each with a versioned name printed beside every verdict it gives)
take every run an arm made (fitted or not, with its budget and seed) and apply every condition
themselves, so that no caller can drop one: ``results/claims.yaml`` names the runs,
:mod:`lengen.analysis.verdict_table` applies these rules and writes ``results/VERDICTS.md``, and
the recipes' reports (``lengen reproduce addition``'s ``claims.md``) call the same functions.

The verdicts are plain strings (:data:`VERDICTS`).
"""
from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass, field

REPRODUCED, DIRECTION, NOT_REPRODUCED, UNTESTED = ("reproduced", "direction only",
                                                   "not reproduced", "untested")
VERDICTS = (REPRODUCED, DIRECTION, NOT_REPRODUCED, UNTESTED)


def mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else math.nan


def std(values) -> float:
    """Sample standard deviation (n - 1); nan for fewer than two values."""
    values = list(values)
    if len(values) < 2:
        return math.nan
    m = mean(values)
    return math.sqrt(sum((x - m) ** 2 for x in values) / (len(values) - 1))


def _check_sign(sign) -> int:
    if sign not in (1, -1):
        raise ValueError(f"sign must be +1 (the paper: B above A) or -1 (B below A), got {sign!r}")
    return sign


__all__ = ["VERDICTS", "REPRODUCED", "DIRECTION", "NOT_REPRODUCED", "UNTESTED", "mean", "std"]


# ---- the one rule family for every paper's claim (issue 54) ------------------------------------

PAIRED_GAP = "paired-gap/v1"
PASS_COUNT_V1 = "pass-count/v1"
PASS_COUNT = "pass-count/v2"
SINGLE_ARM = "single-arm/v1"
_BUDGET_TEXT = (
    "every run of both arms has the same budget: steps and batch (and lr, unless the claim "
    "states that each arm runs at its own searched lr) compared as numbers, read from the "
    "csv where it records them")
RULES = {
    PAIRED_GAP: (
        "Arm B above (or below) arm A. Conditions, in order; the first broken one gives "
        f"*untested* with the reason: (1) {_BUDGET_TEXT}; (2) the "
        "seeds were not chosen by either arm's outcome; (3) only fitted runs count (the claim's "
        "fit bar, or a stated reason why the task has none) and only seeds where BOTH arms "
        "fitted (paired), n >= 2 such seeds; (4) one row "
        "per arm and seed (never a best-of-n). Then, with d_s = sign * (B_s - A_s) on each "
        "common seed: *reproduced* when every d_s > 0 AND mean d > the larger within-arm sample "
        "std over those seeds; *direction only* when mean d > 0 otherwise; *not reproduced* when "
        "mean d <= 0."),
    PASS_COUNT: (
        f"A makes the model learn and B (A without it) does not. (1) {_BUDGET_TEXT}; (2) seeds "
        "not chosen by either arm's outcome; (3) the seeds both arms ran, n >= 2 (every finished "
        "run counts: passing is the outcome); (4) one row per arm and seed; (5) A or B passes on "
        ">= 2 of those seeds, else *untested* (one passing run is no direction); *not reproduced* "
        "when A passes on fewer than 2 and B on 2 or more. *reproduced* "
        "when A passes and B fails on every common seed; *direction only* when A passes on more "
        "common seeds than B; *not reproduced* otherwise."),
    PASS_COUNT_V1: (
        "Superseded by pass-count/v2 (kept to read verdicts given under it): as v2 without "
        "condition (5), so a single passing run of A against none of B gave *direction only*."),
    SINGLE_ARM: (
        "One arm's metric meets a threshold ('X reaches >= 90%', 'X fails OOD: < 50'). "
        "(1) one budget over the arm's runs; (2) the seeds were not chosen by an arm's outcome "
        "(a threshold met on the seeds where the arm fitted says nothing about the other "
        "seeds). Runs counted: the fitted ones when the claim is about generalization (among: "
        "fitted), every run otherwise; one row per seed; n >= 2 counted runs, else *untested*. "
        "*reproduced* when every counted run meets it, *direction only* when more than half do, "
        "*not reproduced* otherwise. The range (min-max) of the counted runs is the interval "
        "given."),
}

_NUM = r"\d[\d,]*(?:\.\d+)?(?:[eE][+-]?\d+)?"
_BUDGET_RE = re.compile(rf"^\s*(?P<steps>{_NUM})\s*(?:steps)?\s*(?:x\s*(?P<batch>{_NUM}))?"
                        rf"\s*(?:,?\s*lr\s*(?P<lr>{_NUM}))?\s*(?P<source>\(.*\))?\s*$")


def _number(text: str | None) -> float | None:
    return None if text is None else float(text.replace(",", ""))


@dataclass(frozen=True)
class Budget:
    """A run's training budget as numbers: steps, batch size and learning rate (``None``: not
    recorded). ``source`` says where the numbers come from (a README line, a csv column)."""
    steps: float | None = None
    batch: float | None = None
    lr: float | None = None
    source: str = ""

    FIELDS = ("steps", "batch", "lr")

    @classmethod
    def parse(cls, text: str) -> "Budget":
        """``STEPS [steps] [x BATCH] [, lr LR] [(source)]``, e.g. ``8000 x 128, lr 3e-3
        (README: the fitted budget)``; anything else is refused, so that a budget is never a
        free text that two arms could spell differently."""
        m = _BUDGET_RE.match(str(text))
        if not m:
            raise ValueError(f"budget {text!r}: write it as 'STEPS [steps] [x BATCH] [, lr LR] "
                             "[(source)]', e.g. '8000 x 128, lr 3e-3 (README: the fitted budget)'")
        return cls(_number(m["steps"]), _number(m["batch"]), _number(m["lr"]),
                   (m["source"] or "").strip("() "))

    def known(self) -> dict:
        return {k: getattr(self, k) for k in self.FIELDS if getattr(self, k) is not None}

    def __str__(self) -> str:
        k = self.known()
        if not k:
            return "no budget recorded"
        parts = [f"{k['steps']:g} steps" if "steps" in k else "steps ?"]
        if "batch" in k:
            parts.append(f"x {k['batch']:g}")
        text = " ".join(parts)
        return text + (f", lr {k['lr']:g}" if "lr" in k else "")


@dataclass(frozen=True)
class Run:
    """One run of one arm: its seed, the claim's metric, whether it fitted its training
    distribution by the claim's bar (``None``: the claim has no fit bar, and must say why), and
    its budget (a :class:`Budget`, or its text for :meth:`Budget.parse`)."""
    seed: object
    value: float
    fitted: bool | None = None
    budget: Budget | str = ""

    def __post_init__(self):
        if not isinstance(self.budget, Budget):
            object.__setattr__(self, "budget", Budget.parse(self.budget) if str(self.budget)
                               .strip() else Budget())


@dataclass
class Verdict:
    verdict: str
    reason: str
    rule: str
    n: dict = field(default_factory=dict)          # arm -> runs
    fitted: dict = field(default_factory=dict)     # arm -> fitted runs
    seeds: list = field(default_factory=list)      # the seeds the verdict stands on
    means: dict = field(default_factory=dict)      # arm -> mean over those seeds
    stds: dict = field(default_factory=dict)       # arm -> sample std over those seeds
    diffs: list = field(default_factory=list)      # per common seed: sign * (B - A)


def _fmt(x) -> str:
    return "nan" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.4g}"


def _budget_problem(arms: dict[str, list[Run]], lr_per_arm: str | None = None) -> str | None:
    """Unequal budgets, compared field by field as numbers. Steps must be recorded for every
    run; batch and lr are compared where every arm records them (a field recorded for one arm
    and not another is a problem: the budgets cannot be shown equal). ``lr_per_arm``: the
    claim's reason why each arm runs at its own lr (then lr may differ between arms, never
    within one)."""
    per_arm = {}
    for name, runs in arms.items():
        budgets = sorted({tuple(sorted(r.budget.known().items())) for r in runs})
        if len(budgets) > 1:
            return ("mixed budgets within " + name + " ("
                    + " / ".join(str(Budget(**dict(b))) for b in budgets) + ")")
        per_arm[name] = dict(budgets[0]) if budgets else {}
    missing = [n for n, b in per_arm.items() if "steps" not in b]
    if missing:
        return "no budget (steps) recorded for " + " and ".join(missing)
    for k in Budget.FIELDS:
        have = [n for n, b in per_arm.items() if k in b]
        if have and len(have) < len(per_arm):
            return (f"{k} recorded for {', '.join(have)} only: the budgets cannot be shown "
                    "equal")
        if k == "lr" and lr_per_arm:
            continue
        if len({b.get(k) for b in per_arm.values()}) > 1:
            return "unequal budgets (" + " vs ".join(
                f"{n}: {Budget(**b)}" for n, b in per_arm.items()) + ")"
    return None


def _duplicate_seeds(arms: dict[str, list[Run]]) -> str | None:
    for name, runs in arms.items():
        seeds = [r.seed for r in runs]
        dup = sorted({s for s in seeds if seeds.count(s) > 1}, key=str)
        if dup:
            return f"{name} has several runs on seed(s) {dup}: one row per arm and seed"
    return None


def _check_fit_bars(arms: dict[str, list[Run]], no_fit_bar) -> str:
    """An arm whose runs carry no fit (``fitted`` None) counts every run only when the claim
    says why the task has no fit bar (``no_fit_bar``: arm -> reason); the reasons, for the
    verdict's text."""
    no_fit_bar = dict(no_fit_bar or {})
    by_reason: dict[str, list] = {}
    for name, runs in arms.items():
        if any(r.fitted is None for r in runs):
            if not no_fit_bar.get(name):
                raise ValueError(f"arm {name!r} has runs without a fit bar: give the claim a fit "
                                 "bar, or no_fit_bar with the reason the task has none")
            if any(r.fitted is not None for r in runs):
                raise ValueError(f"arm {name!r} mixes runs with and without a fit bar")
            by_reason.setdefault(no_fit_bar[name], []).append(name)
    return "; ".join(f"no fit bar for {', '.join(names)} ({why}): every run counts"
                     for why, names in by_reason.items())


def _with(note: str, text: str) -> str:
    return f"{text} [{note}]" if note else text


def _fitted_count(runs: list[Run]) -> int:
    return sum(r.fitted is not False for r in runs)


def _common(arms, names, fitted_only: bool) -> list:
    sets = [{r.seed for r in arms[n] if not fitted_only or r.fitted is not False} for n in names]
    return sorted(set.intersection(*sets), key=str)


def _no_nan(arms: dict[str, list[Run]], counted) -> None:
    for name, runs in arms.items():
        for r in runs:
            if counted(r) and isinstance(r.value, numbers.Real) and r.value != r.value:
                raise ValueError(f"arm {name!r}, seed {r.seed}: the value is NaN on a run that "
                                 "counts (fitted, or no fit bar)")


def judge_pair(base: list[Run], other: list[Run], sign: int, *, names=("A", "B"),
               seeds_chosen_by: str | None = None, no_fit_bar: dict | None = None,
               lr_per_arm: str | None = None) -> Verdict:
    """Rule :data:`PAIRED_GAP` (see :data:`RULES`): ``other`` (B) against ``base`` (A); ``sign``
    +1 when the paper says B scores above A, -1 below. ``no_fit_bar``: arm name -> why its runs
    have no fit bar (required for runs whose ``fitted`` is None); ``lr_per_arm``: why the arms'
    lr may differ."""
    sign = _check_sign(sign)
    a, b = names
    arms = {a: list(base), b: list(other)}
    note = _check_fit_bars(arms, no_fit_bar)
    _no_nan(arms, lambda r: r.fitted is not False)
    v = Verdict(UNTESTED, "", PAIRED_GAP, n={k: len(r) for k, r in arms.items()},
                fitted={k: _fitted_count(r) for k, r in arms.items()})
    problem = (("no runs for " + " and ".join(k for k, r in arms.items() if not r))
               if not all(arms.values()) else
               _budget_problem(arms, lr_per_arm) or _duplicate_seeds(arms)
               or (f"seeds chosen by {seeds_chosen_by}" if seeds_chosen_by else None))
    if problem:
        v.reason = _with(note, problem)
        return v
    seeds = _common(arms, names, fitted_only=True)
    v.seeds = seeds
    if len(seeds) < 2:
        v.reason = _with(note, f"{len(seeds)} seed(s) where both arms fitted (n >= 2 needed; "
                         f"{a} fitted {v.fitted[a]} of {v.n[a]}, {b} {v.fitted[b]} of {v.n[b]})")
        return v
    va = {r.seed: r.value for r in base}
    vb = {r.seed: r.value for r in other}
    xa, xb = [va[s] for s in seeds], [vb[s] for s in seeds]
    v.means, v.stds = {a: mean(xa), b: mean(xb)}, {a: std(xa), b: std(xb)}
    v.diffs = [sign * (vb[s] - va[s]) for s in seeds]
    gap, bar = mean(v.diffs), max(v.stds[a], v.stds[b])
    against = [s for s, d in zip(seeds, v.diffs) if d <= 0]
    where = "above" if sign > 0 else "below"
    head = (f"n = {len(seeds)} paired fitted seeds; {b} {where} {a} by mean {_fmt(gap)} "
            f"(larger std {_fmt(bar)})")
    if gap > bar and not against:
        v.verdict, v.reason = REPRODUCED, head + ", every seed in that direction"
    elif gap > 0:
        why = (f"seed(s) {against} the other way" if against else "gap not above the larger std")
        v.verdict, v.reason = DIRECTION, f"{head}: {why}"
    else:
        v.verdict, v.reason = NOT_REPRODUCED, head + ": not in the paper's direction"
    if lr_per_arm:
        note = "; ".join(x for x in (note, f"lr per arm: {lr_per_arm}") if x)
    v.reason = _with(note, v.reason)
    return v


def judge_pass(with_: list[Run], without: list[Run], *, names=("with", "without"),
               seeds_chosen_by: str | None = None, version: str = PASS_COUNT,
               lr_per_arm: str | None = None) -> Verdict:
    """Rule :data:`PASS_COUNT` (or, with ``version`` :data:`PASS_COUNT_V1`, the superseded
    rule): ``with_`` (A) passes and ``without`` (B) does not. A run's ``fitted`` is its pass, so
    every run needs one."""
    if version not in (PASS_COUNT, PASS_COUNT_V1):
        raise ValueError(f"version must be {PASS_COUNT!r} or {PASS_COUNT_V1!r}, got {version!r}")
    a, b = names
    arms = {a: list(with_), b: list(without)}
    for k, rs in arms.items():
        if any(r.fitted is None for r in rs):
            raise ValueError(f"arm {k!r}: pass-count needs each run's pass (its fit bar)")
    v = Verdict(UNTESTED, "", version, n={k: len(r) for k, r in arms.items()},
                fitted={k: sum(bool(x.fitted) for x in r) for k, r in arms.items()})
    problem = (("no runs for " + " and ".join(k for k, r in arms.items() if not r))
               if not all(arms.values()) else
               _budget_problem(arms, lr_per_arm) or _duplicate_seeds(arms)
               or (f"seeds chosen by {seeds_chosen_by}" if seeds_chosen_by else None))
    if problem:
        v.reason = problem
        return v
    seeds = _common(arms, names, fitted_only=False)
    v.seeds = seeds
    if len(seeds) < 2:
        v.reason = f"{len(seeds)} seed(s) both arms ran (n >= 2 needed)"
        return v
    pa = {r.seed: bool(r.fitted) for r in with_}
    pb = {r.seed: bool(r.fitted) for r in without}
    na, nb = sum(pa[s] for s in seeds), sum(pb[s] for s in seeds)
    head = f"n = {len(seeds)} common seeds; {a} passes on {na}, {b} on {nb}"
    if na + nb == 0:
        v.reason = head + ": no run passes"
    elif version == PASS_COUNT and na < 2 and nb < 2:
        v.reason = head + ": neither arm passes on 2 or more seeds"
    elif version == PASS_COUNT and na < 2:
        v.verdict, v.reason = NOT_REPRODUCED, head + f": {a} passes on fewer than 2 seeds"
    elif na == len(seeds) and nb == 0:
        v.verdict, v.reason = REPRODUCED, head + ": on every seed"
    elif na > nb:
        v.verdict, v.reason = DIRECTION, head + ": not on every seed"
    else:
        v.verdict, v.reason = NOT_REPRODUCED, head
    return v


_OPS = {">=": lambda x, t: x >= t, ">": lambda x, t: x > t, "<=": lambda x, t: x <= t,
        "<": lambda x, t: x < t}


def judge_single(runs: list[Run], op: str, threshold: float, *, among: str = "fitted",
                 name: str = "arm", seeds_chosen_by: str | None = None,
                 no_fit_bar: str | None = None) -> Verdict:
    """Rule :data:`SINGLE_ARM`: every counted run's value ``op`` ``threshold``. ``among``:
    'fitted' (only fitted runs count) or 'all'. ``seeds_chosen_by``: the outcome that chose
    the seeds (then *untested*); ``no_fit_bar``: why the runs have no fit bar (required when a
    run's ``fitted`` is None)."""
    if op not in _OPS:
        raise ValueError(f"op must be one of {sorted(_OPS)}, got {op!r}")
    if among not in ("fitted", "all"):
        raise ValueError(f"among must be 'fitted' or 'all', got {among!r}")
    runs = list(runs)
    note = _check_fit_bars({name: runs}, {name: no_fit_bar} if no_fit_bar else None)
    counts = (lambda r: True) if among == "all" else (lambda r: r.fitted is not False)
    _no_nan({name: runs}, counts)
    v = Verdict(UNTESTED, "", SINGLE_ARM, n={name: len(runs)}, fitted={name: _fitted_count(runs)})
    problem = (_budget_problem({name: runs}) or _duplicate_seeds({name: runs})
               or (f"seeds chosen by {seeds_chosen_by}" if seeds_chosen_by else None))
    if problem:
        v.reason = _with(note, problem)
        return v
    counted = [r for r in runs if counts(r)]
    v.seeds = [r.seed for r in counted]
    if len(counted) < 2:
        v.reason = _with(note, f"{len(counted)} counted run(s) (n >= 2 needed; "
                         f"{v.fitted[name]} of {len(runs)} fitted)")
        return v
    xs = [r.value for r in counted]
    v.means, v.stds = {name: mean(xs)}, {name: std(xs)}
    k = sum(_OPS[op](x, threshold) for x in xs)
    head = (f"{k} of {len(counted)} {'fitted ' if among == 'fitted' else ''}runs {op} "
            f"{_fmt(threshold)} (range {_fmt(min(xs))}-{_fmt(max(xs))})")
    if k == len(counted):
        v.verdict = REPRODUCED
    elif 2 * k > len(counted):
        v.verdict = DIRECTION
    else:
        v.verdict = NOT_REPRODUCED
    v.reason = _with(note, head)
    return v


__all__ += ["PAIRED_GAP", "PASS_COUNT", "PASS_COUNT_V1", "SINGLE_ARM", "RULES", "Budget", "Run",
            "Verdict", "judge_pair", "judge_pass", "judge_single"]
