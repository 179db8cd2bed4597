"""lengen.recipes.common: the helpers every sweep recipe shares."""
import json
import os
from types import SimpleNamespace

from lengen.recipes.common import add_eval_only_rows, trained_columns


def test_trained_columns_swaps_an_evaluation_only_column_for_its_base_once():
    assert trained_columns(["rope_pi", "alibi", "rope"], {"rope_pi": "rope"}) == ["rope", "alibi"]
    assert trained_columns(["alibi"], {"rope_pi": "rope"}) == ["alibi"]


def _sweep(statuses):
    specs = [SimpleNamespace(name=f"{m}-s0", tags={"model": m, "seed": 0}) for m in statuses]
    rows = [{"model": m, "seed": 0, "split": "len=4", "value": 1.0} for m in statuses]
    res = SimpleNamespace(rows=rows, failures=[],
                          status={s.name: {"status": st} for s, st in zip(specs, statuses.values())})
    return specs, res


def test_add_eval_only_rows_tags_rows_keeps_failures_and_rewrites_results(tmp_path):
    specs, res = _sweep({"rope": "done", "alibi": "done"})
    seen = []

    def evaluate(spec, col):
        seen.append((spec.name, col))
        return [{"split": "len=8", "value": 0.5, "model": "rope"}]

    rows, failures = add_eval_only_rows(res.rows, res, specs, str(tmp_path), {"rope_pi": "rope"},
                                        evaluate, log=lambda *_: None)
    assert seen == [("rope-s0", "rope_pi")]                  # only the base's run is evaluated
    assert rows[:2] == res.rows and not failures
    assert rows[2] == {"split": "len=8", "value": 0.5, "model": "rope_pi", "seed": 0,
                       "status": "ok"}                        # the column's tag wins
    assert json.load(open(tmp_path / "results.json")) == rows
    assert "rope_pi" in open(tmp_path / "results.csv").read()

    def broken(spec, col):
        raise ValueError("no weights")

    (tmp_path / "b").mkdir()                                  # the sweep's folder exists
    rows, failures = add_eval_only_rows(res.rows, res, specs, str(tmp_path / "b"),
                                        {"rope_pi": "rope"}, broken, log=lambda *_: None)
    assert rows == res.rows                                   # the sweep's rows are kept
    assert failures == [{"name": "rope-s0 (rope_pi)", "error": "ValueError: no weights"}]
    assert json.load(open(tmp_path / "b" / "failures.json")) == failures


def test_add_eval_only_rows_skips_failed_base_runs_and_leaves_the_sweep_files(tmp_path):
    specs, res = _sweep({"rope": "failed"})
    rows, failures = add_eval_only_rows(res.rows, res, specs, str(tmp_path), {"rope_pi": "rope"},
                                        lambda *a: 1 / 0, log=lambda *_: None)
    assert rows == res.rows and failures == []
    assert not os.listdir(tmp_path)                           # nothing changed: nothing rewritten
