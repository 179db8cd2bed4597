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
    digits = torch.tensor([[int(c) for c in text[::-1]]])
    hint0 = torch.zeros(1, dtype=torch.long) if task.hints else None
    return torch.cat([task.write(digits, hint0)[0], torch.tensor([EOS])])


def test_classify_cases(task):
    prompt, target = task.parse_prompt("42 + 39")        # 081: carry at the units
    assert torch.equal(target, answer_for(task, "081"))
    ok = classify(task, prompt, target, target)
    assert ok["correct"] and ok["carry"] and ok["wrong_digits"] == 0 and ok["n_digits"] == 2
    assert ok["carry_in"] == [False, True, False]        # 2 + 9 carries into the tens only
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
    # per digit: the tens (the one digit with a carry in) is wrong in "091" only; the units and
    # hundreds (no carry in) are both wrong in "180"
    assert rows[("digit_acc_carry_in", None, None)]["value"] == pytest.approx(2 / 3)
    assert rows[("digit_acc_carry_in", None, None)]["count"] == 3
    assert rows[("digit_acc_no_carry_in", None, None)]["value"] == pytest.approx(4 / 6)
    assert rows[("digit_acc_no_carry_in", None, None)]["count"] == 6
    assert rows[("single_digit_error_share", None, None)]["value"] == 0.5
    assert rows[("wrong_digits_count", 1, None)]["value"] == 1
    assert rows[("wrong_digits_count", 2, None)]["value"] == 1
    assert rows[("error_position_count", None, 1)]["value"] == 1
    assert all(r["run"] == "x" and r["split"] == "len=2" for r in rows.values())


def test_error_analysis_from_real_generation():
    """A briefly trained model: generated answers classified; counts add up; accuracy equals
    teacher-forced exact match on the same sequences."""
    import lengen
    from lengen.eval import evaluate
    from lengen.eval.addition_errors import addition_error_analysis
    from lengen.model import Transformer

    torch.manual_seed(0)
    task = build_task("addition", max_train_length=3, hints=False)
    model = Transformer(lengen.ModelConfig(vocab_size=task.vocab_size, d_model=32, n_layers=2,
                                           n_heads=2, posenc="rope"))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(150):
        b = task.train_batch(32, g)
        loss = torch.nn.functional.cross_entropy(model(b.inputs)[b.loss_mask],
                                                 b.targets[b.loss_mask])
        opt.zero_grad()
        loss.backward()
        opt.step()
    rows, recs = addition_error_analysis(model, task, ["len=2", "len=3"], n_sequences=40,
                                         batch_size=16, seed=5)
    assert len(recs) == 80
    tf = evaluate(model, task, ["len=2", "len=3"], n_sequences=40, batch_size=16, seed=5)
    for split in ("len=2", "len=3"):
        want = next(r["value"] for r in tf if r["split"] == split and r["metric"] == "seq_acc")
        got = next(r["value"] for r in rows
                   if r["split"] == split and r["metric"] == "seq_acc_generated")
        assert got == pytest.approx(want)
        wrong = [r for r in recs if r["split"] == split and not r["correct"]]
        counts = sum(r["value"] for r in rows
                     if r["split"] == split and r["metric"] == "wrong_digits_count")
        assert counts == len(wrong)
