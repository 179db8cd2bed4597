"""Error analysis of addition answers (lengen.eval.addition_errors)."""
from __future__ import annotations

import pytest
import torch

from lengen.eval.addition_errors import classify, summarize
from lengen.tasks import build_task
from lengen.tasks.sequence.base import EOS


@pytest.fixture(params=[dict(), dict(format="standard"), dict(hints=False)])
def task(request):
    return build_task("addition", max_train_length=10, **request.param)


def answer_for(task, text):
    """Token ids of an answer for sum text written most significant digit first (W digits)."""
    W = len(text)
    digits = torch.tensor([[int(c) for c in text[::-1]]])
    hint0 = torch.zeros(1, dtype=torch.long) if task.hints else None
    return torch.cat([task.write(digits, hint0)[0], torch.tensor([EOS])])


def test_classify_cases(task):
    prompt, target = task.parse_prompt("42 + 39")        # 081: carry at the units
    assert torch.equal(target, answer_for(task, "081"))
    ok = classify(task, prompt, target, target)
    assert ok["correct"] and ok["carry"] and ok["wrong_digits"] == 0 and ok["n_digits"] == 2
    one = classify(task, prompt, target, answer_for(task, "091"))
    assert not one["correct"] and one["wrong_digits"] == 1 and one["wrong_positions"] == [1]
    two = classify(task, prompt, target, answer_for(task, "180"))
    assert two["wrong_digits"] == 2 and sorted(two["wrong_positions"]) == [0, 2]
    # premature: EOS after two of three digits (reversed: the least significant two)
    short = answer_for(task, "81")
    pre = classify(task, prompt, target, short)
    assert pre["premature"] and not pre["correct"] and pre["wrong_positions"] == [2]
    long_ = answer_for(task, "1081")
    assert classify(task, prompt, target, long_)["overlong"]
    p2, t2 = task.parse_prompt("12 + 13")
    assert not classify(task, p2, t2, t2)["carry"]


def test_summarize_rows(task):
    prompt, target = task.parse_prompt("42 + 39")
    recs = [classify(task, prompt, target, target),
            classify(task, prompt, target, answer_for(task, "091")),
            classify(task, prompt, target, answer_for(task, "180"))]
    rows = {(r["metric"], r.get("k"), r.get("position")): r for r in summarize(recs, {"run": "x"})}
    assert rows[("seq_acc_generated", None, None)]["value"] == pytest.approx(1 / 3)
    assert rows[("acc_with_carry", None, None)]["value"] == pytest.approx(1 / 3)
    assert rows[("acc_without_carry", None, None)]["value"] is None
    assert rows[("single_digit_error_share", None, None)]["value"] == 0.5
    assert rows[("wrong_digits_count", 1, None)]["value"] == 1
    assert rows[("wrong_digits_count", 2, None)]["value"] == 1
    assert rows[("error_position_count", None, 1)]["value"] == 1
    assert all(r["run"] == "x" and r["split"] == "len=2" for r in rows.values())
