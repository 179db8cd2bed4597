"""Tables of ``lengen reproduce addition`` (reads rows, never trains; figures in
:mod:`.figures`).

From the sweep's rows (final EM per run and length, EM during training, error-analysis rows;
tagged ``setting label N seed data_seed group``, failed runs as one row with ``status`` failed):

* ``scores.csv``: one record per run: in-distribution EM (mean over 1..N), OOD EM (mean over
  N+1..M), EM at M, the *reach* (the longest K with EM >= ``REACH`` % at every length 1..K; the
  paper reads "generalizes to 45 digits" off its plots, our threshold is stated) and its ratio to
  N, whether the run passes each reading of "learned its training lengths" (``fits``: mean EM
  >= ``FIT`` % over 1..N; ``learns``: over N//2+1..N, :data:`.scores.READINGS`), or
  ``diverged`` / ``failed``;
* ``table.md`` / ``table.csv``: per setting (the scale's N): trials (diverged), how many fit and
  learn, in-distribution EM over all trials, and OOD EM, EM at M and reach as means ± std over
  the runs that pass (n given): an unfitted run says nothing about generalization;
* ``claims.md`` / ``claims.csv``: each claim the paper states in words (:mod:`.published`), what
  our runs show for it at this scale, and a verdict (reproduced / direction only / not
  reproduced / untested) per reading by the ``judge_*`` rules of
  :mod:`lengen.analysis.verdicts` (the engine of ``results/VERDICTS.md``), each row naming its
  rule and reason: paired over the seeds where both arms pass, n >= 2, at equal budgets, never
  a best trial against another;
* ``errors.md``: Fig. 9 (real greedy decoding, both readings: EM of examples with and without a
  carry, and accuracy of answer digits with and without a carry into them), the share
  of wrong answers with exactly one wrong digit (Fig. C.10), premature terminations;
  ``errors_runs.csv`` the same per run (the rows the per-run claims are judged on).
"""
from __future__ import annotations

import math
import os

from lengen.analysis.tables import fmt_mean_std
from lengen.analysis.verdicts import (DIRECTION, NOT_REPRODUCED, PAIRED_GAP, PASS_COUNT, REPRODUCED,
                                      SINGLE_ARM, UNTESTED, Budget,
                                      Run, Verdict, judge_pair, judge_pass, judge_single)
from lengen.fileio import write_csv_atomic
from lengen.recipes.common import write_md
from lengen.recipes.addition.figures import write_figures
from lengen.recipes.addition.published import BEYOND, CLAIMS, PAPER_REACH
from lengen.recipes.addition.scores import (FIT, READINGS, REACH, _mean, _std, best,
                                            curves_by_run, pooled, reach, reading_range,
                                            run_scores, trials)
from lengen.recipes.addition.specs import (FIGURES, PE_LABELS, PES, SCALES, SETTINGS,
                                           max_test_length)
from lengen.sweep import training_span

NEAR_ZERO = 5.0     # % EM at the error length below which a run is left out of the share
VARIANCE_SPREAD = 10.0   # OOD EM points the fitted trials must spread by (the variance claim)
CARRY_RATIO = 2.0   # digit error rates with / without a carry in "close" within this factor


def _f(x, d=1) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{d}f}"


def _pm(v) -> str:
    """mean ± sample std of ``v`` to one decimal (mean alone for one value, - for none)."""
    return fmt_mean_std(_mean(v), _std(v), 1)


def _n_of(runs, key) -> str:
    return f"{sum(bool(r[key]) for r in runs)} of {len(runs)}"


def write_table(scores, out: str, *, scale: str, caption: str) -> dict:
    s = SCALES[scale]
    N, M = s["N"], s["M"]
    lo, _ = reading_range("learns", N)
    grid = [["Setting", "trials ok (diverged)", f"fit 1..{N}", f"learn {lo}..{N}",
             f"EM 1..{N}, all", f"OOD EM {N + 1}..{M}, fitted", f"OOD EM, learned",
             f"EM at {M}, fitted", f"reach from {lo}, learned (x N)"]]
    records = []
    for setting in [x for x in SETTINGS if any(r["setting"] == x for r in scores)]:
        runs = trials(scores, setting, N)
        div = [r for r in scores if r["setting"] == setting and r["status"] == "diverged"
               and int(r["N"]) == N]
        fit = [r for r in runs if r["fits"]]
        learned = [r for r in runs if r["learns"]]
        reach_learned = _mean([r["reach_learns"] for r in learned])
        grid.append([SETTINGS[setting]["label"], f"{len(runs)} ({len(div)})",
                     _n_of(runs, "fits"), _n_of(runs, "learns"),
                     _pm([r["in_dist"] for r in runs]),
                     _pm([r["ood"] for r in fit]) + (f" (n={len(fit)})" if fit else ""),
                     _pm([r["ood"] for r in learned])
                     + (f" (n={len(learned)})" if learned else ""),
                     _pm([r["at_M"] for r in fit]),
                     "-" if reach_learned is None
                     else f"{reach_learned:.1f} ({reach_learned / N:.2f}x)"])
        records.append(dict(setting=setting, label=SETTINGS[setting]["label"], trials=len(runs),
                            diverged=len(div), fits=len(fit), learns=len(learned),
                            in_dist_mean=_mean([r["in_dist"] for r in runs]),
                            ood_mean_fitted=_mean([r["ood"] for r in fit]),
                            ood_std_fitted=_std([r["ood"] for r in fit]),
                            ood_mean_learned=_mean([r["ood"] for r in learned]),
                            ood_std_learned=_std([r["ood"] for r in learned]),
                            ood_mean_all=_mean([r["ood"] for r in runs]),
                            at_M_mean_fitted=_mean([r["at_M"] for r in fit]),
                            reach_learns_mean_learned=reach_learned,
                            seeds=" ".join(str(r["seed"]) for r in runs),
                            fitted_seeds=" ".join(str(r["seed"]) for r in fit)))
    paths = {"table_md": os.path.join(out, "table.md"), "table_csv": os.path.join(out,
                                                                                  "table.csv")}
    write_md(paths["table_md"], "Exact match (%) by setting (Zhou et al. 2024, decimal addition)",
        caption, grid,
        f"A run *fits* its training lengths when its mean EM over 1..{N} is >= {FIT:.0f}%, and "
        f"*learns* addition when its mean EM over {lo}..{N} is (the second reading leaves out "
        f"the short lengths where randomized positions' evaluation draw, not the model, costs "
        f"EM). OOD and reach are means ± sample std over the runs that fit (or learn), n in "
        f"brackets: a run that did not learn its training lengths says nothing about length "
        f"generalization. Reach = the longest K with EM >= {REACH:.0f}% at every length "
        f"{lo}..K, over the runs that learn (ratio to N in brackets; counted from {lo} so that "
        f"the short-length dip does not zero it). Diverged runs (NaN loss) are counted in brackets and left "
        f"out of the statistics.")
    write_csv_atomic(records, paths["table_csv"])
    return paths


def write_errors(rows, scores, out: str, *, scale: str, caption: str) -> dict:
    s = SCALES[scale]
    grid = [["Setting", "EM with carry (n)", "EM without carry (n)", "digit acc., carry in (n)",
             "digit acc., no carry in (n)", "one wrong digit, % of wrong (n)",
             "premature EOS %", "runs"]]
    records = []
    for setting in [x for x in SETTINGS if any(r["setting"] == x for r in scores)]:
        runs = {r["run"] for r in trials(scores, setting, s["N"])}
        have = {r["run"] for r in rows if r.get("metric") == "acc_with_carry"} & runs
        if not have:
            continue
        wc, nwc = pooled(rows, have, "acc_with_carry")
        wo, nwo = pooled(rows, have, "acc_without_carry")
        dc, ndc = pooled(rows, have, "digit_acc_carry_in")
        dn, ndn = pooled(rows, have, "digit_acc_no_carry_in")
        # the paper leaves near-zero-accuracy runs out of the single-digit share
        ok_runs = {r["run"] for r in rows if r.get("run") in have and r.get("metric") ==
                   "seq_acc_generated" and 100 * float(r["value"]) >= NEAR_ZERO}
        one, n_wrong = pooled(rows, ok_runs, "single_digit_error_share")
        pre, _ = pooled(rows, have, "premature_rate")
        grid.append([SETTINGS[setting]["label"], f"{_f(wc)} ({nwc})", f"{_f(wo)} ({nwo})",
                     f"{_f(dc)} ({ndc})", f"{_f(dn)} ({ndn})", f"{_f(one)} ({n_wrong})",
                     _f(pre), str(len(have))])
        records.append(dict(setting=setting, em_with_carry=wc, n_with_carry=nwc,
                            em_without_carry=wo, n_without_carry=nwo, digit_acc_carry_in=dc,
                            n_digits_carry_in=ndc, digit_acc_no_carry_in=dn,
                            n_digits_no_carry_in=ndn, single_digit_share=one,
                            n_wrong=n_wrong, premature=pre, runs=len(have)))
    paths = {"errors_md": os.path.join(out, "errors.md"),
             "errors_csv": os.path.join(out, "errors.csv"),
             "errors_runs_csv": os.path.join(out, "errors_runs.csv")}
    write_csv_atomic(error_runs(rows, scores, s["N"]), paths["errors_runs_csv"])
    lens = ", ".join(map(str, s["error_lengths"]))
    write_md(paths["errors_md"], f"Error analysis of greedy decoding at lengths {lens} (Fig. 9, "
        f"Fig. C.10)", caption, grid,
        f"Pooled over the trials and the error lengths ({s['error_sequences']} sequences per "
        f"length and run). Carry, per example: whether the sum needs any carry (at n digits an "
        f"example has none with probability 0.55^n, so that class empties with length); per "
        f"digit: whether a carry enters the answer digit (the reading used for the claim). "
        f"The single-digit share leaves out runs below {NEAR_ZERO:.0f}% EM at "
        f"a length, as the paper leaves out its two near-zero runs. Premature = the answer "
        f"stopped (EOS) before writing all its digits. The paper: errors about as frequent with "
        f"as without carry; > 90% of FIRE's wrong answers at 100 digits have one wrong digit.")
    write_csv_atomic(records, paths["errors_csv"])
    return paths


# ---- claims: each judged by a rule of lengen.analysis.verdicts (the one engine, issue 54) -------
#: Fig. 7's signs: does random-space augmentation raise (+1) or lower (-1) the PE's OOD EM
SPACES_SIGN = {"rope": 1, "kerple_log": 1, "nope": -1, "fire": -1}
#: Fig. 8's: (arm without randomized positions, arm with them, the paper's sign of with - without)
RANDOMIZED = {"fire": ("fire-norand", "fire", 1), "kerple_log": ("kerple_log", "kerple_log-rand",
                                                                  -1)}
LR_PER_ARM = "each setting at the lr its own search found (specs.SCALES per_setting)"


def _budget(scale: str, setting: str) -> Budget:
    """The setting's budget at this scale, as numbers (the scale's, with its ``per_setting``
    entries: the lr / steps the setting's search found)."""
    s = SCALES[scale]
    s = dict(s, **s.get("per_setting", {}).get(setting, {}))
    return Budget(float(s["steps"]), float(s["batch_size"]), float(s["lr"]), f"scale {scale}")


def _runs(scores, setting: str, N: int, field: str, reading: str, scale: str) -> list[Run]:
    """Every finished run of ``setting`` at ``N`` (data order 0), fitted = passes ``reading``."""
    b = _budget(scale, setting)
    return [Run(int(r["seed"]), math.nan if r[field] is None else float(r[field]),
                bool(r[reading]), b) for r in trials(scores, setting, N)]


def _lr_note(scale: str, *settings) -> str | None:
    own = SCALES[scale].get("per_setting", {})
    return LR_PER_ARM if len({_budget(scale, x).lr for x in settings}) > 1 and any(
        x in own for x in settings) else None


def _fields(v: Verdict, a: str, b: str, sign: int = 1) -> dict:
    """The verdict's numbers under the csv's column names (base = arm A, other = arm B)."""
    have = bool(v.seeds) and a in v.means
    return dict(verdict=v.verdict, rule=v.rule, why=v.reason, n=len(v.seeds),
                base_mean=v.means.get(a) if have else None,
                base_std=v.stds.get(a) if have else None,
                other_mean=v.means.get(b) if have else None,
                other_std=v.stds.get(b) if have else None,
                diff=sign * _mean(v.diffs) if v.diffs else None,
                larger_std=max(v.stds[a], v.stds[b]) if have else None)


def _paired(scores, a: str, b: str, sign: int, N: int, reading: str, scale: str,
            field: str = "ood"):
    """Rule paired-gap: b against a over the seeds where both pass ``reading``, with each arm's
    pass count beside it."""
    la, lb = SETTINGS[a]["label"], SETTINGS[b]["label"]
    ra, rb = (_runs(scores, x, N, field, reading, scale) for x in (a, b))
    v = judge_pair(ra, rb, sign, names=(la, lb), lr_per_arm=_lr_note(scale, a, b))
    f = _fields(v, la, lb, sign)
    means = (f"; {lb} {_pms(f['other_mean'], f['other_std'])} vs {la} "
             f"{_pms(f['base_mean'], f['base_std'])}" if f["base_mean"] is not None else "")
    text = (f"{lb} passes {v.fitted[lb]} of {v.n[lb]}, {la} {v.fitted[la]} of {v.n[la]}{means}; "
            f"{v.rule}: {v.reason}")
    return f, text, dict(n_base_runs=len(ra), n_other_runs=len(rb))


def _pms(m, sd) -> str:
    return fmt_mean_std(m, sd, 1)


def _record(c: dict, reading: str, verdict: str, ours: str, n=None, **extra) -> dict:
    return dict(key=c["key"], where=c["where"], claim=c["text"], paper=c["paper"],
                reading=reading, ours=ours, verdict=verdict, n=n, **extra)


def _single(c: dict, reading: str, runs: list[Run], op: str, threshold: float, among: str,
            ours: str, **extra) -> dict:
    v = judge_single(runs, op, threshold, among=among, name="FIRE")
    return _record(c, reading, v.verdict, f"{ours}; {v.rule}: {v.reason}", n=len(v.seeds),
                   rule=v.rule, why=v.reason, **extra)


def _claim_rows(rows, scores, scale: str) -> list[dict]:
    """One record per claim (per compared PE where a claim names several) and reading, each
    verdict given by a rule of :mod:`lengen.analysis.verdicts` (its name in ``rule``)."""
    s = SCALES[scale]
    N, M = s["N"], s["M"]
    have = {r["setting"] for r in scores if r["status"] in ("ok", "diverged")
            and int(r["N"]) == N}
    out = []
    for c in CLAIMS:
        key = c["key"]
        for reading in READINGS:
            if key == "fire_100" and "fire" in have:
                runs = _runs(scores, "fire", N, "at_M", reading, scale)
                ours = (f"FIRE trained on 1..{N}: EM at {M} digits, "
                        f"{sum(bool(r.fitted) for r in runs)} of {len(runs)} runs pass")
                if N < 40:
                    out.append(_record(c, reading, UNTESTED, ours + "; the claim is for 1..40 "
                                       "-> 100 digits, and trained on 1..10 the paper itself "
                                       "finds no extension (Fig. 13)",
                                       n=sum(bool(r.fitted) for r in runs)))
                else:
                    out.append(_single(c, reading, runs, ">", c["value"], "fitted", ours))
            elif key == "others_degrade" and "fire" in have:
                for pe in PES[1:]:
                    if pe not in have:
                        continue
                    f, text, extra = _paired(scores, "fire", pe, -1, N, reading, scale)
                    out.append(_record(dict(c, key=f"{key}:{pe}", text=f"FIRE extends further "
                                            f"than {PE_LABELS[pe]}: " + c["text"]), reading,
                                       f["verdict"], text, **extra,
                                       **{k: x for k, x in f.items() if k != "verdict"}))
            elif key in ("no_hints", "reversed"):
                suffix = "-nohints" if key == "no_hints" else "-standard"
                for pe in PES:
                    if pe not in have or pe + suffix not in have:
                        continue
                    a, b = (passed_by_seed(scores, x, N, reading) for x in (pe, pe + suffix))
                    la, lb = SETTINGS[pe]["label"], SETTINGS[pe + suffix]["label"]
                    v = judge_pass([Run(sd, 0.0, p, _budget(scale, pe)) for sd, p in a.items()],
                                   [Run(sd, 0.0, p, _budget(scale, pe + suffix))
                                    for sd, p in b.items()], names=(la, lb),
                                   lr_per_arm=_lr_note(scale, pe, pe + suffix))
                    common = set(v.seeds)
                    na = sum(p for sd, p in a.items() if sd in common)
                    nb = sum(p for sd, p in b.items() if sd in common)
                    oods = [r["ood"] for r in trials(scores, pe + suffix, N)]
                    ours = (f"{la} passes on {na} of the {len(common)} seeds both ran, {lb} on "
                            f"{nb} (its OOD EM {_pm(oods)}); {v.rule}: {v.reason}")
                    out.append(_record(dict(c, key=f"{key}:{pe}"), reading, v.verdict, ours,
                                       n=len(common), base_passed=na, other_passed=nb,
                                       rule=v.rule, why=v.reason))
            elif key == "spaces":
                for pe, sign in SPACES_SIGN.items():
                    if pe not in have or pe + "-spaces" not in have:
                        continue
                    f, text, extra = _paired(scores, pe, pe + "-spaces", sign, N, reading, scale)
                    out.append(_record(dict(c, key=f"{key}:{pe}"), reading, f["verdict"], text,
                                       sign=sign, **extra,
                                       **{k: x for k, x in f.items() if k != "verdict"}))
            elif key == "randomized":
                for pe, (without, with_, sign) in RANDOMIZED.items():
                    if without not in have or with_ not in have:
                        continue
                    f, text, extra = _paired(scores, without, with_, sign, N, reading, scale)
                    out.append(_record(dict(c, key=f"{key}:{pe}"), reading, f["verdict"], text,
                                       sign=sign, **extra,
                                       **{k: x for k, x in f.items() if k != "verdict"}))
            elif key in ("carry", "single_digit") and "fire" in have:
                out.append(_error_claim(c, reading, rows, scores, N, scale))
            elif key == "train_length" and "fire" in have:
                Ns = sorted({int(r["N"]) for r in scores if r["setting"] == "fire"
                             and r["status"] == "ok"})
                if len(Ns) < 2:
                    continue
                lo_n, hi_n = Ns[0], Ns[-1]
                b = _budget(scale, "fire")
                ext = {n: [Run(int(r["seed"]), float(r[f"reach_{reading}"]) - n, bool(r[reading]),
                               b) for r in trials(scores, "fire", n)] for n in Ns}
                v = judge_pair(ext[lo_n], ext[hi_n], 1, names=(f"N = {lo_n}", f"N = {hi_n}"))
                ours = ("digits extended past N (reach - N) over the runs that pass: "
                        + ", ".join(f"N = {n}: {_pm([r.value for r in ext[n] if r.fitted])} "
                                    f"({sum(bool(r.fitted) for r in ext[n])} of {len(ext[n])})"
                                    for n in Ns)
                        + f" (the paper's reach: "
                        + ", ".join(f"{n} -> {m}" for n, m in PAPER_REACH.items())
                        + f"); {v.rule}: {v.reason}")
                f = _fields(v, f"N = {lo_n}", f"N = {hi_n}")
                out.append(_record(c, reading, v.verdict, ours,
                                   **{k: x for k, x in f.items() if k != "verdict"}))
            elif key == "variance" and "fire" in have:
                # the paper: every trial near 100 % in distribution (init x data-order grid)
                runs = [r for r in trials(scores, "fire", N, data_seed=None)]
                fit_field = "em_fits" if reading == "fits" else "em_learns"
                arm = [Run((int(r["seed"]), int(r["data_seed"])),
                           math.nan if r[fit_field] is None else float(r[fit_field]), True,
                           _budget(scale, "fire")) for r in runs]
                ood = [r["ood"] for r in runs if r[reading]]
                rec = _single(c, reading, arm, ">=", FIT, "all",
                              f"FIRE passes on {len(ood)} of {len(runs)} trials; OOD EM of "
                              "those " + (f"{min(ood):.1f}..{max(ood):.1f}" if ood else "-"))
                # the rule written in results/addition-cpu-recipe/README.md before its runs:
                # one trial that does not fit contradicts "every trial", however many others
                # do; when all fit, their OOD EM must spread by at least VARIANCE_SPREAD points
                if rec["verdict"] == DIRECTION:
                    rec.update(verdict=NOT_REPRODUCED,
                               why=f"{rec['why']}; a trial that does not fit contradicts "
                                   "'every trial'")
                elif rec["verdict"] == REPRODUCED and max(ood) - min(ood) < VARIANCE_SPREAD:
                    rec.update(verdict=NOT_REPRODUCED,
                               why=f"{rec['why']}; OOD EM spread {max(ood) - min(ood):.1f} "
                                   f"< {VARIANCE_SPREAD:g} points")
                out.append(rec)
            elif key == "5m":
                out.append(_record(c, reading, "n/a", "not run by this recipe (model size "
                                                      "ablation)"))
    for name, info in BEYOND.items():
        if name not in have or "fire" not in have:
            continue
        for reading in READINGS:
            c = dict(key=name, where=info["paper"], text=f"{SETTINGS[name]['label']} extends "
                     f"further than FIRE (trained {info['train']}: {info['claim']})",
                     paper=info["claim"])
            f, text, extra = _paired(scores, "fire", name, 1, N, reading, scale)
            out.append(_record(c, reading, f["verdict"], text, **extra,
                               **{k: x for k, x in f.items() if k != "verdict"}))
    return out


def passed_by_seed(scores, setting: str, N: int, reading: str) -> dict:
    """init seed -> whether ``setting``'s run passed ``reading`` (data order 0); a diverged run
    (NaN loss) did not learn, so it counts as not passing; a run that failed for another reason
    (a crash, a killed worker) says nothing and is left out."""
    out = {int(r["seed"]): bool(r[reading]) for r in trials(scores, setting, N)}
    for r in scores:
        if (r["setting"] == setting and int(r["N"]) == N and r["status"] == "diverged"
                and r.get("data_seed", 0) == 0):
            out[int(r["seed"])] = False
    return out


def error_runs(rows, scores, N: int, settings=None) -> list[dict]:
    """Per finished run (data order 0): its error analysis pooled over the error lengths, the
    digit error rates with and without a carry into the digit (%), |ln| of their ratio, and
    the share of wrong answers with one wrong digit (None for a run whose EM is below
    ``NEAR_ZERO`` % at every error length: the paper leaves near-zero runs out), with the run's
    fits / learns."""
    out = []
    for setting in settings or SETTINGS:
        for r in trials(scores, setting, N):
            one = {r["run"]}
            dc, _ = pooled(rows, one, "digit_acc_carry_in")
            dn, _ = pooled(rows, one, "digit_acc_no_carry_in")
            if dc is None or dn is None:
                continue
            ec, en = 100 - dc, 100 - dn
            ok = {x["run"] for x in rows if x.get("run") == r["run"] and x.get("metric") ==
                  "seq_acc_generated" and 100 * float(x["value"]) >= NEAR_ZERO}
            share, n_wrong = pooled(rows, ok, "single_digit_error_share")
            out.append(dict(run=r["run"], setting=setting, seed=int(r["seed"]), fits=r["fits"],
                            learns=r["learns"], err_carry_in=ec, err_no_carry_in=en,
                            carry_log_ratio=(abs(math.log(ec / en)) if ec > 0 and en > 0
                                             else 0.0 if ec == en == 0 else math.inf),
                            single_digit_share=share, n_wrong=n_wrong))
    return out


def _error_claim(c: dict, reading: str, rows, scores, N: int, scale: str) -> dict:
    """Fig. 9 (carry) and Fig. C.10 (one wrong digit), per FIRE run (rule single-arm over the
    runs that pass the reading): carry, |ln(error rate with a carry into the digit / without)|
    <= ln 2 (within a factor 2); one wrong digit, > 90 % of a run's wrong answers (a run whose
    EM is below ``NEAR_ZERO`` % at every error length left out, as the paper leaves out its
    near-zero runs). Each run's rates pooled over the error lengths."""
    b = _budget(scale, "fire")
    runs, shown = [], []
    for e in error_runs(rows, scores, N, ("fire",)):
        if c["key"] == "carry":
            value = e["carry_log_ratio"]
            if value is None:
                continue
            shown.append(f"s{e['seed']}: {_f(e['err_carry_in'])} / {_f(e['err_no_carry_in'])}%")
        else:
            value = e["single_digit_share"]
            if value is None:
                continue
            shown.append(f"s{e['seed']}: {_f(value)}% of {e['n_wrong']}")
        runs.append(Run(int(e["seed"]), value, bool(e[reading]), b))
    if not runs:
        return _record(c, reading, UNTESTED, "no FIRE run has error-analysis rows", n=0)
    what = ("digit error rate with / without a carry in" if c["key"] == "carry"
            else "share of wrong answers with one wrong digit")
    ours = f"FIRE per run, {what}: " + ", ".join(shown)
    if c["key"] == "carry":
        return _single(c, reading, runs, "<=", math.log(CARRY_RATIO), "fitted", ours)
    return _single(c, reading, runs, ">", c["value"], "fitted", ours)


def write_claims(rows, scores, out: str, *, scale: str, caption: str) -> dict:
    """Judge the recipe's claims on ``rows`` / ``scores`` with the verdict engine's rules
    (:mod:`lengen.analysis.verdicts`) and write ``claims.md`` / ``claims.csv`` into ``out``;
    returns the paths written (``claims_md``, ``claims_csv``)."""
    recs = _claim_rows(rows, scores, scale)
    s = SCALES[scale]
    lo, _ = reading_range("learns", s["N"])
    grid = [["Claim (where)", "Paper", "Reading", "Ours at this scale", "Verdict"]]
    grid += [[f"{r['claim']} ({r['where']})", r["paper"], r["reading"], r["ours"], r["verdict"]]
             for r in recs]
    paths = {"claims_md": os.path.join(out, "claims.md"),
             "claims_csv": os.path.join(out, "claims.csv")}
    write_md(paths["claims_md"], "The paper's stated claims beside our runs", caption, grid,
        f"Every claim is judged twice, over the runs that pass each reading: *fits* (mean EM >= "
        f"{FIT:.0f}% over 1..{s['N']}) and *learns* (over {lo}..{s['N']}); a run that passes "
        f"neither says nothing about generalization and is left out. Each verdict is given by a "
        f"rule of lengen.analysis.verdicts, named in the row with its reason (the rules' full "
        f"text: results/VERDICTS.md, docs/verdicts.md): comparisons of OOD EM (lengths "
        f"{s['N'] + 1}..{s['M']}) by {PAIRED_GAP}, paired over the seeds where both arms pass at "
        f"the same steps and batch (n >= 2, else *untested*; each setting at its own searched lr "
        f"where the scale gives one); 'makes the model learn' claims (hints, format) by "
        f"{PASS_COUNT}; one-arm thresholds (carry within a factor {CARRY_RATIO:g}, one wrong "
        f"digit, every trial fits) by {SINGLE_ARM}, per run. The paper's own statistic is "
        f"mostly the best of 10 trials trained on 1..40 digits and tested to 100; ours are per "
        f"run over the seeds of this scale.",
        label_columns=4)
    write_csv_atomic(recs, paths["claims_csv"])
    return paths


def write_report(rows, out: str, *, scale: str, caption: str,
                 wall_seconds: float | None = None, log=print) -> dict:
    """``scores.csv`` and every table, figure and claim of the report into ``out``, from the
    long-format ``rows`` of all runs (training, evaluation and error analysis); ``caption`` is
    the tables' caption. Returns the paths written, by name."""
    scores = run_scores(rows, M=lambda N: max_test_length(scale, N))
    paths = {"scores_csv": os.path.join(out, "scores.csv")}
    write_csv_atomic(scores, paths["scores_csv"])
    span = training_span(out, [r["run"] for r in scores if r["status"] == "ok"])
    cap = caption + (f" Training wall time (first run start to last run end, the gaps between "
                     f"parts included): {span / 60:.1f} min." if span is not None else "")
    cap += (f" Wall time of this invocation: {wall_seconds / 60:.1f} min."
            if wall_seconds is not None else "")
    paths.update(write_table(scores, out, scale=scale, caption=cap))
    paths.update(write_errors(rows, scores, out, scale=scale, caption=cap))
    paths.update(write_claims(rows, scores, out, scale=scale, caption=cap))
    paths.update(write_figures(rows, scores, out, scale=scale))
    with open(paths["table_md"]) as f:
        log(f.read())
    with open(paths["claims_md"]) as f:
        log(f.read())
    log("wrote " + ", ".join(sorted(paths.values())))
    return paths


__all__ = ["REACH", "FIT", "run_scores", "best", "trials", "reach", "write_report",
           "write_table", "write_errors", "write_claims", "curves_by_run", "error_runs", "FIGURES"]
