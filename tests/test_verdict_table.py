"""results/VERDICTS.md is generated from results/claims.yaml by lengen.analysis.verdict_table
(issue 54): the committed table is what the generator gives, the issue's examples get the rule's
verdicts, a malformed claims file fails with a clear error, and every pre-registered reading's
rule was committed before its data (from git; skipped without .git)."""
import os

import pytest

from lengen.analysis import registration
from lengen.analysis.verdict_table import RESULTS, ClaimError, judge_reading, load, render

CLAIMS = os.path.join(RESULTS, "claims.yaml")


@pytest.fixture(scope="module")
def claims():
    return load(CLAIMS)


def _verdicts(claims, cid):
    c = next(c for c in claims if c["id"] == cid)
    return {r["folder"]: judge_reading(c, r)[0] for r in c["readings"]}


def test_the_committed_table_is_the_generated_one(claims):
    with open(os.path.join(RESULTS, "VERDICTS.md")) as f:
        committed = f.read()
    assert committed == render(claims), (
        "results/VERDICTS.md is stale: python -m lengen.analysis.verdict_table --write "
        "results/VERDICTS.md")


def test_coupling_at_12000_steps_against_fire_at_8000_is_untested(claims):
    for folder, v in _verdicts(claims, "cho-coupling-above-fire").items():
        assert v.verdict == "untested" and v.reason.startswith("unequal budgets"), folder


def test_fig3_fire_above_kerplelog_is_one_verdict_in_every_folder(claims):
    vs = _verdicts(claims, "zhou-fig3-fire-above-kerplelog")
    assert len(vs) == 4 and all(v.verdict == "untested" for v in vs.values())  # gpu included
    assert vs["addition-fig3-search"].seeds == [3]        # the one shared fitted seed


def test_bucket_sort_relative_does_not_count_the_run_at_88_1(claims):
    v = _verdicts(claims, "ruoss-t1-bucket_sort-relative")["randomized-pe-cpu-encodings"]
    assert v.verdict == "untested" and v.fitted["relative"] == 1 and v.n["relative"] == 2


def test_a_malformed_claims_file_is_refused(tmp_path):
    base = open(CLAIMS).read()
    bad = tmp_path / "c.yaml"
    bad.write_text(base.replace("current: true", "current: false", 1))
    with pytest.raises(ClaimError, match="exactly one reading must be current"):
        load(str(bad))
    bad.write_text(base.replace("rule: paired-gap", "rule: best-of-n", 1))
    with pytest.raises(ClaimError, match="rule must be one of"):
        load(str(bad))
    bad.write_text(base.replace("registration: exploratory", "registration: preregistered", 1))
    with pytest.raises(ClaimError, match="registration must be"):
        load(str(bad))


def test_an_unknown_arm_key_is_refused(claims):
    c = dict(claims[0])
    r = dict(c["readings"][0])
    r["arms"] = [dict(r["arms"][0], filter="x"), r["arms"][1]]
    with pytest.raises(ClaimError, match="unknown key"):
        judge_reading(c, r)


@pytest.mark.skipif(not registration.have_history(),
                    reason="no .git: the rule order needs the repository's history")
def test_every_pre_registered_rule_precedes_its_data(claims):
    assert registration.check(claims) == []
    # and the check can fail: the same data judged against a rule committed with its results
    r = next(r for c in claims for r in c["readings"] if r["folder"] == "addition-cpu-recipe")
    late = dict(r, rule_commit=registration.first_commit(registration.data_files(r)[0]))
    assert any("not after the rule" in p for p in registration.check_reading(late))


def test_the_error_analyses_and_n20_have_verdicts(claims):
    carry_all = _verdicts(claims, "zhou-fig9-carry-no-more-errors")
    one_all = _verdicts(claims, "zhou-figC10-one-wrong-digit")
    carry, one = carry_all["addition-cpu-seeds"], one_all["addition-cpu-seeds"]
    n20 = _verdicts(claims, "zhou-fig13-reach-grows-with-n")["addition-n20-cpu"]
    # audit #1: seeds 0, 3, 5 were chosen where FIRE learned, so one arm's threshold on them
    # says nothing (it read reproduced / not reproduced on FIRE's fitted seeds 0 and 3)
    for v in (carry, one):
        assert v.verdict == "untested" and v.reason.startswith("seeds chosen by FIRE's")
    # the fixed-seed grid (seeds 0-4, FIRE fits on 0 and 3) is the claims' current reading
    grid = "addition-cpu-recipe/seeds0-4"
    assert carry_all[grid].verdict == "reproduced" and carry_all[grid].seeds == [0, 3]
    assert one_all[grid].verdict == "not reproduced" and one_all[grid].seeds == [0, 3]
    assert n20.verdict == "untested" and "seeds chosen by" in n20.reason


def test_descriptive_claims_are_listed_and_checked(claims, tmp_path):
    assert {d["id"] for d in claims.descriptive} >= {"iw-t2-idealized-warps", "copy-rope-nope"}
    with open(os.path.join(RESULTS, "VERDICTS.md")) as f:       # == render(claims), tested above
        assert "| copy-rope-nope |" in f.read().split("## Addressed without a verdict")[1]
    bad = tmp_path / "claims.yaml"
    with open(CLAIMS) as f:
        base = f.read()
    bad.write_text(base.replace("  why: one seed per arm", "  because: one seed per arm", 1))
    with pytest.raises(ClaimError, match="unknown key"):
        load(str(bad))


# ---- bad data is an error naming the claim, the file and the seed (audit #5, #10, #26-#29) ----
def _judge(tmp_path, csv_text, rule="paired-gap", reading=None, **arm):
    (tmp_path / "r.csv").write_text(csv_text)
    base = dict(file="r.csv", value="v", budget="8000 x 128", fit={"value": "fit", "bar": 1})
    arms = [dict(base, label="A", select="arm == 'a'"), dict(base, label="B", select="arm == 'b'")]
    arms = [{k: v for k, v in dict(a, **arm).items() if v is not None} for a in arms]
    claim = {"id": "c", "rule": rule, "sign": 1, "op": ">=", "threshold": 0.5}
    if rule == "single-arm":
        arms = arms[:1]
    return judge_reading(claim, dict({"folder": "f", "arms": arms}, **(reading or {})),
                         str(tmp_path))[0]


ROWS = ("arm,seed,v,fit,steps,lr\na,0,1,1,8000,0.001\na,1,2,1,8000,0.001\nb,0,3,1,8000,0.001\n"
        "b,1,4,1,8000,0.001\n")


def test_the_csv_budget_is_read_and_checked(tmp_path):
    assert _judge(tmp_path, ROWS).verdict == "reproduced"
    # the literal's steps disagree with the csv's column: an error, not a verdict
    with pytest.raises(ClaimError, match="budget says steps 12000 but r.csv has steps 8000"):
        _judge(tmp_path, ROWS, budget="12000 x 128")
    with pytest.raises(ClaimError, match="budget says lr 0.003"):
        _judge(tmp_path, ROWS, budget="8000 x 128, lr 3e-3")
    # lr read from the csv per arm: unequal unless the reading says why
    rows = ROWS.replace("b,0,3,1,8000,0.001", "b,0,3,1,8000,0.003").replace(
        "b,1,4,1,8000,0.001", "b,1,4,1,8000,0.003")
    assert _judge(tmp_path, rows).reason.startswith("unequal budgets")
    assert _judge(tmp_path, rows, reading={"lr_per_arm": "searched"}).verdict == "reproduced"
    with pytest.raises(ClaimError, match="STEPS"):
        _judge(tmp_path, ROWS, budget="the recipe's budget")


def test_a_missing_fit_bar_needs_a_reason(tmp_path):
    with pytest.raises(ClaimError, match="no_fit_bar"):
        _judge(tmp_path, ROWS, fit=None)
    v = _judge(tmp_path, ROWS, fit=None, no_fit_bar="perplexity")
    assert "no fit bar for A, B (perplexity): every run counts" in v.reason


def test_duplicate_runs_are_never_averaged_or_dropped(tmp_path):
    dup = ROWS + "a,1,9,1,8000,0.001\n"
    assert "one row per arm and seed" in _judge(tmp_path, dup).reason
    with pytest.raises(ClaimError, match="agg 'mean' needs run"):
        _judge(tmp_path, dup, agg="mean")
    lines = dup.strip().splitlines()
    runs = "\n".join(["run," + lines[0]] + [f"r{i},{x}" for i, x in enumerate(lines[1:])]) + "\n"
    with pytest.raises(ClaimError, match="seed 1 has 2 runs"):
        _judge(tmp_path, runs, agg="mean", run="run")
    # rows of one run are averaged (two rows of run r0 on seed 0)
    one_run = runs.replace("r4,", "r1,")
    assert _judge(tmp_path, one_run, agg="mean", run="run").n == {"A": 2, "B": 2}
    # pivot: two rows for one seed and length were reduced to the first
    long = "arm,seed,length,v\n" + "".join(
        f"{a},{s},{n},{s + n}\n" for a in "ab" for s in (0, 1) for n in (8, 16))
    piv = dict(value="L16 / L8", pivot={"columns": "length", "values": "v"}, fit=None,
               no_fit_bar="x", budget="1200 steps")
    assert _judge(tmp_path, long, **piv).n == {"A": 2, "B": 2}
    with pytest.raises(ClaimError, match="several rows for"):
        _judge(tmp_path, long + "a,0,16,99\n", **piv)


def test_fit_where_must_keep_the_arm_filter(tmp_path):
    rows = "arm,seed,split,v\n" + "".join(
        f"{a},{s},{sp},{v}\n" for a, v0 in (("a", 0), ("b", 1)) for s in (0, 1)
        for sp, v in (("ood", s + v0), ("iid", 1)))
    ok = {"where": "arm == 'a' and split == 'iid'", "value": "v", "bar": 1}
    single = dict(rule="single-arm", select="arm == 'a' and split == 'ood'", budget="1 steps")
    v = _judge(tmp_path, rows, fit=ok, **single)
    assert v.n == {"A": 2} and v.fitted == {"A": 2}
    # without the arm's filter, fit.where reads both arms' fit rows by seed
    with pytest.raises(ClaimError, match="add the arm's filter"):
        _judge(tmp_path, rows, fit=dict(ok, where="split == 'iid'"), **single)
    # a filter that names the arm's column but keeps both arms: two fit rows for one run
    with pytest.raises(ClaimError, match="one fit per run"):
        _judge(tmp_path, rows, fit=dict(ok, where="split == 'iid' and arm in ['a', 'b']"),
               **single)


def test_nan_seeds_and_values_raise_with_the_claim_file_and_seed(tmp_path):
    with pytest.raises(ClaimError, match="c/f/A: r.csv, seed 1: value 'v' is NaN"):
        _judge(tmp_path, ROWS.replace("a,1,2,1", "a,1,,1"))
    with pytest.raises(ClaimError, match="NaN seed"):
        _judge(tmp_path, ROWS.replace("a,1,2,1", "a,,2,1"))


def test_missing_join_and_pivot_keys_name_the_claim_the_file_and_its_columns(tmp_path):
    """A seed, pivot or budget-join key that is not a column of its csv is an error naming the
    claim (id/folder/label), the file and the columns the file has, not a bare KeyError."""
    cols = "arm, fit, lr, seed, steps, v"
    with pytest.raises(ClaimError, match=rf"^c/f/A: seed column\(s\) 'run_seed' not in r.csv "
                                         rf"\(its columns: {cols}\)$"):
        _judge(tmp_path, ROWS, seed="run_seed")
    long = "arm,seed,length,v\n" + "".join(
        f"{a},{s},{n},{s + n}\n" for a in "ab" for s in (0, 1) for n in (8, 16))
    piv = dict(value="L16 / L8", fit=None, no_fit_bar="x", budget="1200 steps")
    with pytest.raises(ClaimError, match=r"^c/f/A: pivot column\(s\) 'len' not in r.csv "
                                         r"\(its columns: arm, length, seed, v\)$"):
        _judge(tmp_path, long, pivot={"columns": "len", "values": "v"}, **piv)
    with pytest.raises(ClaimError,
                       match=r"c/f/A: pivot column\(s\) 'seed_id', 'value' not in r.csv"):
        _judge(tmp_path, long, pivot={"columns": "length", "values": "value"},
               seed="seed_id", **piv)
    with pytest.raises(ClaimError, match="c/f/A: pivot must be a mapping with keys columns"):
        _judge(tmp_path, long, pivot={"column": "length", "values": "v"}, **piv)
    # a budget read from another file's column, joined on a key
    (tmp_path / "steps.csv").write_text("run,steps\nr0,8000\nr1,8000\nr2,8000\nr3,8000\n")
    runs = "run," + ROWS.replace("\na", "\nr?,a").replace("\nb", "\nr?,b")
    for i in range(4):
        runs = runs.replace("r?", f"r{i}", 1)
    join = {"file": "steps.csv", "on": "run", "column": "steps", "unit": " steps x 128"}
    assert _judge(tmp_path, runs, budget=join).verdict == "reproduced"
    with pytest.raises(ClaimError, match=r"^c/f/A: budget join column\(s\) 'run' not in "
                                         rf"r.csv \(its columns: {cols}\)$"):
        _judge(tmp_path, ROWS, budget=join)
    with pytest.raises(ClaimError, match=r"^c/f/A: budget join column\(s\) 'step' not in "
                                         r"steps.csv \(its columns: run, steps\)$"):
        _judge(tmp_path, runs, budget=dict(join, column="step"))
    with pytest.raises(ClaimError, match="c/f/A: budget must be a literal or a mapping"):
        _judge(tmp_path, runs, budget={"file": "steps.csv", "column": "steps"})
