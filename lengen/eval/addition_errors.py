"""Error analysis of decimal addition from real greedy decoding (Zhou et al. 2024, Sec. 5 / App. C:
Fig. 9 "with vs without carry", Fig. C.10-C.12 error positions and counts, and the premature
termination they report for non-FIRE encodings).

Every wrong answer is compared with the target digit by digit, by significance (digit 0 = the
least significant), after dropping hints and blanks (the digits carry the value; a model that writes
the right digits after a wrong hint is still counted in ``hint_errors``):

* ``carry``: whether the true sum needed any carry (the example's class in Fig. 9, per-example
  reading);
* ``carry_in``: for each answer digit (by significance), whether a carry enters it (the digit's
  class in Fig. 9, per-digit reading). The paper "classified erroneous predictions into two
  categories: those with and without carry" without saying whether an example or a digit is
  classified; past ~10 digits almost every example has a carry somewhere (no carry at n digits
  has probability 0.55^n), so only the per-digit reading leaves two non-empty classes at the
  lengths the paper plots. Both are reported;
* ``wrong_digits``: how many digit positions differ (missing digits count as wrong);
* ``wrong_positions``: their significances (Fig. C.10 / C.12);
* ``premature``: the output stopped (EOS) before writing as many digits as the target has;
* ``overlong``: more digits than the target (no EOS in time);
* ``hint_errors``: hint tokens that differ from the target's (only with index hints).

    rows, records = addition_error_analysis(model, task, ["len=20", "len=25"], n_sequences=200)
"""
from __future__ import annotations

from collections import Counter

import torch

from lengen.errors import ArgumentError
from lengen.eval.generation import generated_batches
from lengen.tasks.sequence.addition import HINTS, add_digits
from lengen.tasks.sequence.base import EOS


def answer_digits(task, ids) -> tuple[list[int], list[int], bool]:
    """Answer tokens (hints, digits, EOS) -> (digits least significant first, hints in written
    order, whether an EOS ended it). Tokens after the first EOS are ignored; other tokens (e.g. a
    stray '+') count as neither."""
    ids = ids.tolist() if isinstance(ids, torch.Tensor) else list(ids)
    ended = EOS in ids
    if ended:
        ids = ids[:ids.index(EOS)]
    digits = [t - task.first_digit for t in ids if t in task.digit_ids]
    hints = [t for t in ids if task.first_hint <= t < task.first_hint + len(HINTS)]
    if task.format == "standard":
        digits = digits[::-1]
    return digits, hints, ended


def classify(task, prompt, target, output) -> dict:
    """One example: the prompt, the target answer (+EOS) and the model's output, all token ids."""
    want, want_h, _ = answer_digits(task, target)
    got, got_h, ended = answer_digits(task, output)
    W = len(want)
    # carries of the true sum, from the operands' digits (least significant first)
    ex = task.read_example(prompt)
    a = [int(c) for c in str(ex["a"]).zfill(W)[::-1]]
    b = [int(c) for c in str(ex["b"]).zfill(W)[::-1]]
    _, carry_in = add_digits(torch.tensor([a]), torch.tensor([b]))
    wrong = [i for i in range(W) if i >= len(got) or got[i] != want[i]]
    out_list = output.tolist() if isinstance(output, torch.Tensor) else list(output)
    tgt_list = target.tolist() if isinstance(target, torch.Tensor) else list(target)
    return {"correct": out_list[:len(tgt_list)] == tgt_list,
            "carry": bool(carry_in.any()),
            "carry_in": [bool(c) for c in carry_in[0].tolist()],
            "n_digits": W - 1,
            "wrong_digits": len(wrong) + max(0, len(got) - W),
            "wrong_positions": wrong,
            "premature": ended and len(got) < W,
            "overlong": len(got) > W,
            "hint_errors": sum(1 for x, y in zip(got_h, want_h) if x != y)
            + abs(len(got_h) - len(want_h))}


def summarize(records: list[dict], meta: dict | None = None) -> list[dict]:
    """Rows per length: accuracy of examples with and without carry and of answer digits with
    and without a carry into them (Fig. 9, both readings), the share of wrong answers with
    exactly one wrong digit (the paper: > 90% for FIRE), premature terminations, and the counts
    behind the histograms (``wrong_digits=k`` and ``position=i`` metrics)."""
    need = ("n_digits", "carry", "correct", "wrong_positions", "carry_in")
    if not isinstance(records, (list, tuple)):
        raise ArgumentError(f"records must be the list of per-example records that "
                            f"addition_error_analysis returns, got {type(records).__name__}")
    for i, r in enumerate(records):
        missing = [k for k in need if not isinstance(r, dict) or k not in r]
        if missing:
            raise ArgumentError(f"records[{i}] is not a per-example record of "
                                f"addition_error_analysis: it lacks {', '.join(missing)} (a record "
                                f"has {', '.join(need)})")
    by_len: dict[int, list[dict]] = {}
    for r in records:
        by_len.setdefault(r["n_digits"], []).append(r)
    rows = []
    for n, rs in sorted(by_len.items()):
        base = dict(meta or {}, split=f"len={n}", n=n, sequences=len(rs))

        def add(metric, value, **extra):
            rows.append(dict(base, metric=metric, value=value, **extra))

        for carry in (True, False):
            sub = [r for r in rs if r["carry"] == carry]
            add("acc_with_carry" if carry else "acc_without_carry",
                sum(r["correct"] for r in sub) / len(sub) if sub else None, count=len(sub))
        digits = {True: [], False: []}   # carry into the digit -> right / wrong per digit
        for r in rs:
            wrong_at = set(r["wrong_positions"])
            for i, c in enumerate(r["carry_in"]):
                digits[c].append(i not in wrong_at)
        for carry, ds in digits.items():
            add("digit_acc_carry_in" if carry else "digit_acc_no_carry_in",
                sum(ds) / len(ds) if ds else None, count=len(ds))
        wrong = [r for r in rs if not r["correct"]]
        add("seq_acc_generated", 1 - len(wrong) / len(rs))
        add("single_digit_error_share",
            sum(r["wrong_digits"] == 1 for r in wrong) / len(wrong) if wrong else None,
            count=len(wrong))
        add("premature_rate", sum(r["premature"] for r in rs) / len(rs))
        for k, c in sorted(Counter(r["wrong_digits"] for r in wrong).items()):
            add("wrong_digits_count", c, k=k)
        for i, c in sorted(Counter(p for r in wrong for p in r["wrong_positions"]).items()):
            add("error_position_count", c, position=i)
    return rows


@torch.inference_mode()
def addition_error_analysis(model, task, splits, *, n_sequences: int = 200, seed: int = 1234,
                            batch_size: int = 64, device="cpu", meta: dict | None = None):
    """Greedy-decode ``n_sequences`` evaluation examples of each split (the same examples and
    positions teacher forcing scores) and classify every answer -> (rows of :func:`summarize`,
    per-example records)."""
    records = []
    for split in splits:
        for prompts, answers, outputs in generated_batches(model, task, split, n_sequences,
                                                           batch_size, seed, device):
            for p, a, o in zip(prompts, answers, outputs):
                records.append(dict(classify(task, p, a, o), split=split))
    return summarize(records, meta), records


__all__ = ["answer_digits", "classify", "summarize", "addition_error_analysis"]
