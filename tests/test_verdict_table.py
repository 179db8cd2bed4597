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
    carry = _verdicts(claims, "zhou-fig9-carry-no-more-errors")["addition-cpu-seeds"]
    one = _verdicts(claims, "zhou-figC10-one-wrong-digit")["addition-cpu-seeds"]
    n20 = _verdicts(claims, "zhou-fig13-reach-grows-with-n")["addition-n20-cpu"]
    # FIRE seeds 0 and 3 fit (seed 5 learns, does not fit, and is not counted)
    assert carry.verdict == "reproduced" and carry.seeds == [0, 3]
    assert one.verdict == "not reproduced" and one.seeds == [0, 3]
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
