"""lengen.recipes.common: the helpers every sweep recipe shares."""
import json
import os
from types import SimpleNamespace

from lengen.recipes.common import (add_eval_only_rows, log_failures, train_section,
                                   trained_columns)


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


def test_train_section_takes_the_scales_keys_and_seeds_the_data_order_alike():
    scale = {"steps": 30, "batch_size": 8, "ckpt_every": 10, "lr": 1e-3, "betas": (0.9, 0.99)}
    got = train_section(scale, 3, "cpu", log_every=5, base={"optimizer": "adamw", "lr": 0.1},
                        copy=("lr", "betas"), schedule="cosine")
    assert got == {"optimizer": "adamw", "lr": 1e-3, "steps": 30, "batch_size": 8,
                   "betas": [0.9, 0.99], "schedule": "cosine", "seed": 3, "data_seed": 3,
                   "ckpt_every": 10, "log_every": 5, "device": "cpu"}
    assert isinstance(got["betas"], list)         # as a stored config.json reads it back
    assert train_section(scale, 3, "cpu", log_every=5, data_seed=7)["data_seed"] == 7


def test_log_failures_says_how_many_and_where_only_when_some_failed():
    said = []
    log_failures([], "runs/x", said.append)
    assert said == []
    log_failures([{"name": "a"}, {"name": "b"}], "runs/x", said.append)
    assert said == [("2 run(s) failed; see runs/x/failures.json. Rerun the same command to "
                     "retry them (finished runs are reused).")]
