"""Length sweeps: test lengths, rows per length, and the score = unweighted mean over N+1..M."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from lengen.eval.length_sweep import (add_lengths, evaluate_lengths, length_curves, length_scores,
                                      length_splits, sweep_lengths)
from lengen.tasks import build_task


def test_sweep_lengths():
    assert sweep_lengths(41, 500) == list(range(41, 501))
    strided = sweep_lengths(41, 500, 30)
    assert strided[:3] == [41, 71, 101] and strided[-2:] == [491, 500] and len(strided) == 17
    assert sweep_lengths(41, 101, 30) == [41, 71, 101]        # no duplicate end
    assert sweep_lengths(5, 5, 3) == [5]
    assert length_splits([41, 500]) == ["len=41", "len=500"]
    for bad in ((0, 5, 1), (6, 5, 1), (1, 5, 0)):
        with pytest.raises(ValueError):
            sweep_lengths(*bad)


def rows_for(run, accs, metric="token_acc", tokens=None):
    return [dict(run=run, split=f"len={n}", metric=metric, value=a, tokens=(tokens or {}).get(n, 1))
            for n, a in accs.items()]


def test_score_is_the_unweighted_mean_over_unseen_lengths():
    # lengths 1..4 (training range) must not count; long lengths have many more tokens but each
    # length weighs the same; failed runs and other metrics are ignored
    rows = rows_for("a", {2: 1.0, 4: 1.0, 5: 0.5, 6: 1.0, 9: 0.0}, tokens={9: 1000})
    rows += rows_for("a", {5: 0.9, 6: 0.9}, metric="seq_acc")
    rows += rows_for("b", {5: 0.25, 6: 0.75})
    rows += [dict(run="c", status="failed", metric=None, value=None)]
    got = {r["run"]: r for r in length_scores(rows, min_length=5)}
    assert set(got) == {"a", "b"}
    assert got["a"]["score"] == pytest.approx(0.5) and got["a"]["n_lengths"] == 3
    assert (got["a"]["min_n"], got["a"]["max_n"]) == (5, 9)
    assert got["b"]["score"] == pytest.approx(0.5)
    capped = {r["run"]: r["score"] for r in length_scores(rows, min_length=5, max_length=6)}
    assert capped["a"] == pytest.approx(0.75)
    with pytest.raises(ValueError, match="two 'token_acc' rows for length 5"):
        length_scores(rows + rows_for("a", {5: 0.1}), min_length=5)
    curves = length_curves(rows)
    assert curves[("a",)] == ([2, 4, 5, 6, 9], [1.0, 1.0, 0.5, 1.0, 0.0])
    assert add_lengths([{"split": "len=12"}])[0]["n"] == 12


class ParityOracle(nn.Module):
    """Solves parity check; ``wrong_when`` makes it answer wrong at chosen input lengths. A larger
    logit on an input id checks that the argmax ranges over the output classes only."""

    def __init__(self, task, wrong_when=lambda n: False):
        super().__init__()
        self.task, self.wrong_when = task, wrong_when

    def check_length(self, length):
        pass

    def forward(self, x):
        B, T = x.shape
        n = T - 1                                    # one placeholder
        parity = (x[:, :n] == 1).sum(1) % 2
        if self.wrong_when(n):
            parity = 1 - parity
        logits = torch.zeros(B, T, self.task.vocab_size)
        logits[:, :, 0] = 9.0                        # an input id: never a valid answer
        logits[torch.arange(B), -1, self.task.output_offset + parity] = 5.0
        return logits


def test_evaluate_lengths_rows_and_score():
    task = build_task("parity_check", max_train_length=4, max_eval_length=20)
    lengths = [1, 3] + sweep_lengths(5, 20, 5)       # in-domain lengths for curves + test lengths
    rows = evaluate_lengths(ParityOracle(task), task, lengths, n_sequences=6, batch_size=4,
                            meta={"run": "oracle"})
    acc = {r["n"]: r["value"] for r in rows if r["metric"] == "token_acc"}
    assert sorted(acc) == [1, 3, 5, 10, 15, 20] and set(acc.values()) == {1.0}
    for r in rows:
        assert r["length"] == r["n"] + 1 and r["sequences"] == 6   # model input = n + placeholder
    assert length_scores(rows, min_length=5) == [
        dict(run="oracle", score=1.0, n_lengths=4, min_n=5, max_n=20)]
    # wrong on even lengths: 10 and 20 of the four test lengths -> score 0.5
    odd_only = ParityOracle(task, wrong_when=lambda n: n % 2 == 0)
    rows = evaluate_lengths(odd_only, task, lengths, n_sequences=4, batch_size=4,
                            meta={"run": "half"})
    assert length_scores(rows, min_length=5)[0]["score"] == pytest.approx(0.5)
