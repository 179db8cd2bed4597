"""Tables of ``lengen reproduce addition`` (reads rows, never trains; figures in
:mod:`.figures`).

From the sweep's rows (final EM per run and length, EM during training, error-analysis rows;
tagged ``setting label N seed data_seed group``, failed runs as one row with ``status`` failed):

* ``scores.csv``: one record per run: in-distribution EM (mean over 1..N), OOD EM (mean over
  N+1..M), EM at M, the *reach* (the longest K with EM >= ``REACH`` % at every length 1..K; the
  paper reads "generalizes to 45 digits" off its plots, our threshold is stated) and its ratio to
  N, whether the run fitted its training lengths (in-distribution EM >= ``FIT`` %), or
  ``diverged`` / ``failed``;
* ``table.md`` / ``table.csv``: per setting (the scale's N): trials (diverged), in-distribution EM
  mean ± std, OOD EM best trial and mean ± std, EM at M (best), reach (best). ‡ marks settings
  whose best trial did not fit its training lengths (their OOD numbers then mean little);
* ``claims.md`` / ``claims.csv``: each claim the paper states in words (:mod:`.published`), what
  our runs show for it at this scale, and whether it holds here;
* ``errors.md``: Fig. 9 (real greedy decoding, both readings: EM of examples with and without a
  carry, and accuracy of answer digits with and without a carry into them), the share
  of wrong answers with exactly one wrong digit (Fig. C.10), premature terminations.
"""
from __future__ import annotations

import math
import os

from lengen.analysis.tables import fmt_mean_std
from lengen.fileio import write_csv_atomic
from lengen.recipes.common import write_md
from lengen.recipes.addition.figures import write_figures
from lengen.recipes.addition.published import BEYOND, CLAIMS, PAPER_REACH
from lengen.recipes.addition.scores import (FIT, REACH, _mean, _std, best, curves_by_run, pooled,
                                            reach, run_scores, trials)
from lengen.recipes.addition.specs import FIGURES, PE_LABELS, PES, SCALES, SETTINGS
from lengen.sweep import training_span

UNFIT = "‡"
NEAR_ZERO = 5.0     # % EM at the error length below which a run is left out of the share
CARRY_RATIO = 2.0   # digit error rates with / without a carry in "close" within this factor


def _f(x, d=1) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{d}f}"


def _pm(v) -> str:
    """mean ± sample std of ``v`` to one decimal (mean alone for one value, - for none)."""
    return fmt_mean_std(_mean(v), _std(v), 1)


def write_table(scores, out: str, *, scale: str, caption: str) -> dict:
    s = SCALES[scale]
    N, M = s["N"], s["M"]
    grid = [["Setting", "trials ok (diverged)", f"EM 1..{N}", f"OOD EM {N + 1}..{M}, best",
             "OOD EM, mean ± std", f"EM at {M}, best", "reach, best (x N)"]]
    records = []
    for setting in [x for x in SETTINGS if any(r["setting"] == x for r in scores)]:
        runs = trials(scores, setting, N)
        div = [r for r in scores if r["setting"] == setting and r["status"] == "diverged"
               and int(r["N"]) == N]
        b = best(scores, setting, N)
        mark = "" if b is None or b["fitted"] else UNFIT
        grid.append([SETTINGS[setting]["label"], f"{len(runs)} ({len(div)})",
                     _pm([r["in_dist"] for r in runs]),
                     _f(b and b["ood"]) + mark, _pm([r["ood"] for r in runs]),
                     _f(b and b["at_M"]), "-" if b is None else f"{b['reach']} "
                                                             f"({b['ratio']:.2f}x)"])
        records.append(dict(setting=setting, label=SETTINGS[setting]["label"], trials=len(runs),
                            diverged=len(div), in_dist_mean=_mean([r["in_dist"] for r in runs]),
                            ood_best=b and b["ood"], ood_mean=_mean([r["ood"] for r in runs]),
                            ood_std=_std([r["ood"] for r in runs]), at_M_best=b and b["at_M"],
                            reach_best=b and b["reach"], best_run=b and b["run"],
                            fitted=bool(b and b["fitted"])))
    paths = {"table_md": os.path.join(out, "table.md"), "table_csv": os.path.join(out,
                                                                                  "table.csv")}
    write_md(paths["table_md"], "Exact match (%) by setting (Zhou et al. 2024, decimal addition)",
        caption, grid,
        f"Best = the trial with the highest OOD EM. Reach = the longest K with EM >= {REACH:.0f}% "
        f"at every length 1..K (ratio to N in brackets). {UNFIT} the best trial did not fit its "
        f"training lengths (EM 1..{N} below {FIT:.0f}%): its OOD numbers say more about "
        f"under-training than about length generalization. Diverged runs (NaN loss) are counted "
        f"in brackets and left out of the statistics.")
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
             "errors_csv": os.path.join(out, "errors.csv")}
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


NEITHER = "neither run fitted, not counted"


def _compared(a: dict, x: dict) -> bool:
    """Whether a with / without comparison of two best trials says anything: at least one of
    them fitted its training lengths (two unfitted runs differ by under-training, and two zero
    OOD scores would otherwise count as agreeing with any sign the paper states)."""
    return bool(a["fitted"] or x["fitted"])


def _of(ok: int, n: int, total: int) -> str:
    if not n:
        return "untested (neither run fitted for any PE)"
    return f"{ok} of {n} PEs" + (f" ({total - n} not counted)" if n < total else "")


def _claim_rows(rows, scores, scale: str) -> list[dict]:
    s = SCALES[scale]
    N, M = s["N"], s["M"]
    out = []

    def b(setting, n=N):
        return best(scores, setting, n)

    for c in CLAIMS:
        ours, holds = "not run at this scale", "n/a"
        key = c["key"]
        if key == "fire_100" and b("fire"):
            v = b("fire")["at_M"]
            ours = f"best FIRE trial: {_f(v)}% at {M} digits (trained 1..{N})"
            holds = "yes" if v is not None and v > c["value"] else "no"
        elif key == "others_degrade" and b("fire"):
            others = {pe: b(pe) for pe in PES[1:] if b(pe)}
            f = b("fire")["ood"]
            ours = f"best OOD EM: FIRE {_f(f)}, " + ", ".join(
                f"{PE_LABELS[pe]} {_f(r['ood'])}{'' if r['fitted'] else UNFIT}"
                for pe, r in others.items())
            # a PE that did not fit its training lengths says nothing about degrading beyond
            fitted = [r for r in others.values() if r["fitted"]]
            if not b("fire")["fitted"] or not fitted:
                holds = "untested (" + ("FIRE" if not b("fire")["fitted"] else
                                        "no other PE") + " fitted)"
            else:
                holds = ("yes" if all(f > r["ood"] for r in fitted) else "no") + (
                    f" ({len(fitted)} of {len(others)} others fitted)"
                    if len(fitted) < len(others) else "")
        elif key in ("no_hints", "reversed"):
            suffix = "-nohints" if key == "no_hints" else "-standard"
            pairs = [(pe, b(pe), b(pe + suffix)) for pe in PES if b(pe) and b(pe + suffix)]
            if pairs:
                parts, ok, n = [], 0, 0
                for pe, a, x in pairs:
                    counted = _compared(a, x)
                    if counted:
                        n += 1
                        ok += x["ood"] < a["ood"] and (key == "reversed" or
                                                       x["in_dist"] < a["in_dist"])
                    parts.append(f"{PE_LABELS[pe]} {_f(x['in_dist'])}/{_f(x['ood'])} vs "
                                 f"{_f(a['in_dist'])}/{_f(a['ood'])}"
                                 + ("" if counted else f" ({NEITHER})"))
                ours = ("EM in/out of distribution, " + ("without vs with hints: "
                        if key == "no_hints" else "standard vs reversed: ") + "; ".join(parts))
                holds = _of(ok, n, len(pairs))
        elif key in ("spaces", "randomized"):
            want = ({"rope": 1, "kerple_log": 1, "nope": -1, "fire": -1} if key == "spaces"
                    else {"fire": 1, "kerple_log": -1})
            parts, ok, n, n_counted = [], 0, 0, 0
            for pe, sign in want.items():
                if key == "spaces":
                    with_, without = b(pe + "-spaces"), b(pe)
                else:
                    with_, without = ((b("fire"), b("fire-norand")) if pe == "fire"
                                      else (b(pe + "-rand"), b(pe)))
                if not (with_ and without):
                    continue
                d = with_["ood"] - without["ood"]
                n += 1
                counted = _compared(with_, without)
                if counted:
                    n_counted += 1
                    ok += (d > 0) == (sign > 0)
                parts.append(f"{PE_LABELS[pe]} {d:+.1f} (paper: {'+' if sign > 0 else '-'}"
                             + ("" if counted else f"; {NEITHER}") + ")")
            if n:
                ours = "best-trial OOD EM difference: " + ", ".join(parts)
                holds = _of(ok, n_counted, n)
        elif key == "carry":
            runs = {r["run"] for r in trials(scores, "fire", N)}
            dc, ndc = pooled(rows, runs, "digit_acc_carry_in")
            dn, ndn = pooled(rows, runs, "digit_acc_no_carry_in")
            wc, nwc = pooled(rows, runs, "acc_with_carry")
            wo, nwo = pooled(rows, runs, "acc_without_carry")
            if dc is not None and dn is not None:
                ec, en = 100 - dc, 100 - dn
                ours = (f"FIRE digit error rate with a carry in {_f(ec)}% (n={ndc}), without "
                        f"{_f(en)}% (n={ndn}); per example EM with carry {_f(wc)}% (n={nwc}), "
                        f"without {_f(wo)}% (n={nwo})")
                holds = "yes" if max(ec, en) <= CARRY_RATIO * min(ec, en) else "no"
        elif key == "single_digit":
            runs = {r["run"] for r in trials(scores, "fire", N)}
            ok_runs = {r["run"] for r in rows if r.get("run") in runs and r.get("metric") ==
                       "seq_acc_generated" and 100 * float(r["value"]) >= NEAR_ZERO}
            share, n_wrong = pooled(rows, ok_runs, "single_digit_error_share")
            if share is not None:
                ours = f"FIRE: {_f(share)}% of {n_wrong} wrong answers"
                holds = "yes" if share > c["value"] else "no"
        elif key == "train_length":
            Ns = sorted({int(r["N"]) for r in scores if r["setting"] == "fire"})
            got = {n: b("fire", n) for n in Ns if b("fire", n)}
            if len(got) > 1:
                ours = ", ".join(f"{n} -> {r['reach']} ({r['ratio']:.2f}x)"
                                 for n, r in got.items())
                reaches = [r["reach"] for r in got.values()]
                holds = "yes" if all(x < y for x, y in zip(reaches, reaches[1:])) else "no"
                ours += f" (paper: {', '.join(f'{n} -> {m}' for n, m in PAPER_REACH.items())})"
        elif key == "variance":
            grid = [r for r in scores if r["setting"] == "fire" and int(r["N"]) == N
                    and r["status"] == "ok" and r.get("group") in ("main", "heatmap")]
            if len(grid) > 1:
                ood = [r["ood"] for r in grid]
                ind = [r["in_dist"] for r in grid]
                ours = (f"{len(grid)} FIRE runs: in-distribution EM {_f(min(ind))}..{_f(max(ind))}"
                        f", OOD EM {_f(min(ood))}..{_f(max(ood))}")
                holds = "yes" if min(ind) >= FIT and max(ood) - min(ood) >= 10 else "no"
        out.append(dict(key=key, where=c["where"], claim=c["text"], paper=c["paper"], ours=ours,
                        holds=holds))
    for name, info in BEYOND.items():
        r = b(name)
        if r:
            out.append(dict(key=name, where=info["paper"], claim=f"trained {info['train']}: "
                            f"{info['claim']}", paper=info["claim"],
                            ours=f"best trial: reach {r['reach']} "
                            f"({r['ratio']:.2f}x), OOD EM {_f(r['ood'])}; FIRE: "
                            + (f"reach {b('fire')['reach']}, OOD EM {_f(b('fire')['ood'])}"
                               if b("fire") else "-"), holds="n/a"))
    return out


def write_claims(rows, scores, out: str, *, scale: str, caption: str) -> dict:
    recs = _claim_rows(rows, scores, scale)
    grid = [["Claim (where)", "Paper", "Ours at this scale", "Holds here?"]]
    grid += [[f"{r['claim']} ({r['where']})", r["paper"], r["ours"], r["holds"]] for r in recs]
    paths = {"claims_md": os.path.join(out, "claims.md"),
             "claims_csv": os.path.join(out, "claims.csv")}
    s = SCALES[scale]
    write_md(paths["claims_md"], "The paper's stated claims beside our runs", caption, grid,
        f"Best = the trial with the highest OOD EM (lengths {s['N'] + 1}..{s['M']}). The paper's "
        f"numbers are for training on 1..40 digits and testing to 100; at a smaller scale the "
        f"analogous quantity is shown (e.g. EM at the longest test length {s['M']}), and 'holds "
        f"here' judges the claim's direction, not its numbers. Carry: 'yes' when FIRE's digit "
        f"error rates with and without a carry into the digit are within a factor "
        f"{CARRY_RATIO:g} of each other (per-digit reading, see errors.md). Variance: 'yes' "
        f"when every run fits its training lengths and the OOD EM spreads over >= 10 points.")
    write_csv_atomic(recs, paths["claims_csv"])
    return paths


def write_report(rows, out: str, *, scale: str, caption: str,
                 wall_seconds: float | None = None, log=print) -> dict:
    s = SCALES[scale]
    scores = run_scores(rows, M=s["M"])
    paths = {"scores_csv": os.path.join(out, "scores.csv")}
    write_csv_atomic(scores, paths["scores_csv"])
    span = training_span(out, [r["run"] for r in scores if r["status"] == "ok"])
    cap = caption + (f" Training wall time (first run start to last run end): {span / 60:.1f} "
                     f"min." if span is not None else "")
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
           "write_table", "write_errors", "write_claims", "curves_by_run", "FIGURES"]
