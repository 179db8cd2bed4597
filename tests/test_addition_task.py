"""Decimal addition (Zhou et al. 2024): every example checked against Python integer arithmetic
after decoding, hint layout, random blanks, masks, lengths and bad input."""
from __future__ import annotations

import pytest
import torch

from lengen.tasks import build_task
from lengen.tasks.sequence.addition import BLANK, HINTS, PLUS, add_digits
from lengen.tasks.sequence.base import EOS, PAD, SEP, prompts_and_answers

VARIANTS = [dict(), dict(format="standard"), dict(hints=False),
            dict(hints=False, format="standard"), dict(random_spaces=0.4),
            dict(operand_lengths="independent"), dict(hint_start="first"),
            dict(format="standard", hint_order="lsd_first"), dict(hint_order="lsd_first"),
            dict(n_hints=32)]


def rows_of(task, batch):
    """(prompt ids, answer ids without EOS) per row, independent of the task's reader."""
    out = []
    for p, a in zip(*prompts_and_answers(batch)):
        assert int(a[-1]) == EOS
        out.append((p.tolist(), a[:-1].tolist()))
    return out


def digits_and_hints(task, ids):
    """Split a token list of one number into (digits in written order, hints in written order),
    dropping blanks; anything else fails the test."""
    digits, hints = [], []
    for t in ids:
        if t in task.digit_ids:
            digits.append(t - task.first_digit)
        elif task.first_hint <= t < task.first_hint + len(HINTS):
            hints.append(t - task.first_hint)
        else:
            assert t == BLANK, f"unexpected token {t}"
    return digits, hints


def value(task, digits):
    d = digits[::-1] if task.format == "reversed" else digits
    return int("".join(map(str, d)))


@pytest.mark.parametrize("kw", VARIANTS, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "default")
def test_examples_add_up(kw):
    task = build_task("addition", max_train_length=12, max_eval_length=30, **kw)
    g = torch.Generator().manual_seed(0)
    batches = [task.train_batch(64, g)] + [task.eval_batch(f"len={n}", 16, g) for n in (1, 7, 30)]
    for batch in batches:
        for prompt, answer in rows_of(task, batch):
            assert prompt[-1] == SEP and prompt.count(PLUS) == 1
            i = prompt.index(PLUS)
            (da, ha), (db, hb) = (digits_and_hints(task, x) for x in (prompt[:i], prompt[i + 1:-1]))
            dc, hc = digits_and_hints(task, answer)
            assert BLANK not in answer
            n = len(dc) - 1
            assert len(da) == len(db) == n + 1                  # one zero pad each
            a, b, c = value(task, da), value(task, db), value(task, dc)
            assert a + b == c                                    # Python integer arithmetic
            assert max(len(str(a)), len(str(b))) == n or (n == 1 and a < 10 and b < 10)
            if kw.get("operand_lengths") != "independent" and n > 1:
                assert len(str(a)) == len(str(b)) == n          # both n-digit numbers
            if task.hints:
                assert ha == hb == hc                            # same hint, same significance
                # a consecutive run, ascending as written ('written', both formats) or from the
                # least significant digit ('lsd_first': descending as written in 'standard')
                flip = task.format == "standard" and task.hint_order == "lsd_first"
                run = ha[::-1] if flip else ha
                assert run == list(range(run[0], run[0] + n + 1))
                if task.hint_start == "first":
                    assert run[0] == 0
            else:
                assert not (ha or hb or hc)


def spelled(task, prompt, answer):
    """Ids -> the paper's spelling: no spaces, '=' for [SEP], no EOS."""
    text = task.decode(torch.cat([prompt, answer[:-1]]))
    return "".join(text.split()).replace("[SEP]", "=")


def test_the_papers_index_hint_example():
    """Zhou et al. 2024, Sec. 2.2: "42+39=81 is represented as a4b2+a3b9=a8b1" (standard format;
    the first hint on the first written, most significant digit). lengen pads every number with
    one zero (the paper's App. B), which takes the first hint, so with the pad pairs removed and
    the hints relabelled from 'a' our string must be the paper's exactly."""
    task = build_task("addition", format="standard", hint_start="first", max_train_length=2)
    prompt, answer = task.parse_prompt("42 + 39")
    assert spelled(task, prompt, answer) == "a0b4c2+a0b3c9=a0b8c1"
    ids = torch.cat([prompt, answer[:-1]]).tolist()
    numbers, cur = [], []
    for t in ids:                                    # split at '+' and '='
        if t in (PLUS, SEP):
            numbers.append(cur)
            cur = []
        else:
            cur.append(t)
    numbers.append(cur)
    stripped = []
    for i, number in enumerate(numbers):
        assert number[:2] == [task.first_hint, task.first_digit]    # the pad pair: 'a' '0'
        stripped += [t - 1 if t >= task.first_hint else t for t in number[2:]]
        stripped += [PLUS] if i == 0 else [SEP] if i == 1 else [EOS]
    assert spelled(task, torch.tensor(stripped[:-1]), torch.tensor(stripped[-1:])) == \
        "a4b2+a3b9=a8b1"


def test_reversed_hints_follow_the_written_order_too():
    """No reversed-format example in the paper: the same rule (hints ascend as written) gives the
    least significant digit, written first, the first hint; 'lsd_first' (the order lengen wrote
    before issue 27) equals it in the reversed format and descends as written in the standard."""
    rev = build_task("addition", hint_start="first", max_train_length=2)
    assert spelled(rev, *rev.parse_prompt("42 + 39")) == "a2b4c0+a9b3c0=a1b8c0"
    rev_lsd = build_task("addition", hint_start="first", hint_order="lsd_first",
                         max_train_length=2)
    assert spelled(rev_lsd, *rev_lsd.parse_prompt("42 + 39")) == "a2b4c0+a9b3c0=a1b8c0"
    std_lsd = build_task("addition", format="standard", hint_start="first",
                         hint_order="lsd_first", max_train_length=2)
    assert spelled(std_lsd, *std_lsd.parse_prompt("42 + 39")) == "c0b4a2+c0b3a9=c0b8a1"
    # sampled examples with a random start: the standard one is the reversed one with every
    # number's (hint, digit) pairs written in reverse order and the hints relabelled in place
    rev, std = (build_task("addition", format=f, max_train_length=5)
                for f in ("reversed", "standard"))
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    (_, ar), (_, as_) = rev.sample(4, 8, g1), std.sample(4, 8, g2)
    pairs_r, pairs_s = ar.view(8, -1, 2), as_.view(8, -1, 2)      # [B, W, 2]: hint, digit
    assert torch.equal(pairs_s[..., 1], pairs_r[..., 1].flip(1))  # digits: reversed order
    assert torch.equal(pairs_s[..., 0], pairs_r[..., 0])          # hints: the same run as written


def test_hint_start_covers_the_ordered_set():
    task = build_task("addition", max_train_length=10, max_eval_length=10)
    starts = set()
    g = torch.Generator().manual_seed(1)
    for _ in range(20):
        for prompt, _ in rows_of(task, task.eval_batch("len=10", 64, g)):
            starts.add(prompt[0] - task.first_hint)
    assert min(starts) == 0 and max(starts) == len(HINTS) - 11   # 11 hints fit up to the end


def test_n_hints_limits_the_runs_to_the_first_symbols():
    """n_hints = H: every run starts in 0..H - (n + 1) and so stays within the first H symbols,
    all of those starts occur; the default draws the same data as an explicit H = 102 (the one
    generator call lengen made before the option), and the ids do not depend on H."""
    small = build_task("addition", max_train_length=5, max_eval_length=10, n_hints=12)
    g = torch.Generator().manual_seed(3)
    starts, used = set(), set()
    for _ in range(30):
        for batch in (small.train_batch(64, g), small.eval_batch("len=10", 64, g)):
            for prompt, answer in rows_of(small, batch):
                i = prompt.index(PLUS)
                hints = [h for part in (prompt[:i], prompt[i + 1:-1], answer)
                         for h in digits_and_hints(small, part)[1]]
                used |= set(hints)
                if len(digits_and_hints(small, answer)[0]) == 11:     # a len=10 row
                    starts.add(min(hints))
    assert starts == {0, 1} and used == set(range(12))
    assert small.vocab_size == build_task("addition", max_train_length=5).vocab_size
    g1, g2 = (torch.Generator().manual_seed(4) for _ in range(2))
    default = build_task("addition", max_train_length=8).train_batch(32, g1)
    explicit = build_task("addition", max_train_length=8, n_hints=len(HINTS)).train_batch(32, g2)
    assert torch.equal(default.inputs, explicit.inputs)
    with pytest.raises(ValueError, match="at most 11 digits"):
        build_task("addition", max_train_length=5, max_eval_length=12, n_hints=12)
    build_task("addition", max_train_length=5, max_eval_length=12, n_hints=12, hints=False)
    with pytest.raises(ValueError, match="at most 11 digits"):
        small.parse_prompt("123456789012 + 1")


def test_random_blanks_only_in_training_by_default():
    task = build_task("addition", max_train_length=8, random_spaces=0.5)
    g = torch.Generator().manual_seed(0)
    train = task.train_batch(64, g)
    assert (train.inputs == BLANK).any()
    assert not (task.eval_batch("len=8", 64, g).inputs == BLANK).any()
    both = build_task("addition", max_train_length=8, random_spaces=0.5, random_spaces_eval=True)
    assert (both.eval_batch("len=8", 64, g).inputs == BLANK).any()
    # never more than max_spaces in a row, never before the first token
    for prompt, _ in rows_of(task, train):
        assert prompt[0] != BLANK
        run = 0
        for t in prompt:
            run = run + 1 if t == BLANK else 0
            assert run <= task.max_spaces


def test_the_fixed_training_set_has_blanks_however_it_is_first_built():
    """train_set() built directly (not through train_batch) must hold the same training data:
    random spaces included."""
    kw = dict(max_train_length=5, max_eval_length=6, random_spaces=0.5, train_size=50)
    direct = build_task("addition", **kw).train_set()
    via_batch = build_task("addition", **kw)
    via_batch.train_batch(4, torch.Generator().manual_seed(0))
    assert (direct[0] == BLANK).any()
    for a, b in zip(direct, via_batch.train_set()):
        assert torch.equal(a, b)


def test_masks_cover_answer_and_eos_only_and_padding_is_never_scored():
    task = build_task("addition", max_train_length=9)
    b = task.train_batch(32, torch.Generator().manual_seed(2))
    for r in range(32):
        m = b.loss_mask[r]
        assert torch.equal(m, b.eval_mask[r])
        ans = b.targets[r][m].tolist()
        assert ans[-1] == EOS and EOS not in ans[:-1]
        assert not bool((b.targets[r][m] == PAD).any())
        assert int(m.sum()) == task.answer_length(len(ans) // 2 - 1) + 1


def test_lengths_and_limits():
    task = build_task("addition", max_train_length=40)
    assert task.splits()[0] == "len=1" and task.splits()[-1] == "len=100"
    b = task.eval_batch("len=100", 2, torch.Generator().manual_seed(0))
    assert b.inputs.shape[1] == task.input_length(100) == 4 * 101 + 2 + 2 * 101
    assert task.max_input_length(["len=100"]) == task.input_length(100)
    with pytest.raises(ValueError, match="at most 101 digits"):
        build_task("addition", max_eval_length=120)
    build_task("addition", max_eval_length=120, hints=False)       # fine without hints
    spaced = build_task("addition", max_train_length=5, random_spaces=0.3)
    g = torch.Generator().manual_seed(0)
    assert spaced.train_batch(128, g).inputs.shape[1] <= spaced.max_input_length(["len=5"])
    # a clean test set (random_spaces_eval false) is bounded without blanks; with blanks at
    # evaluation it is bounded with them
    assert spaced.max_input_length(["len=50"]) == spaced.input_length(50, False)
    assert spaced.eval_batch("len=50", 4, g).inputs.shape[1] == spaced.input_length(50, False)
    assert spaced.max_input_length(["len=1"]) == spaced.input_length(5, True)
    noisy = build_task("addition", max_train_length=5, random_spaces=0.3,
                       random_spaces_eval=True)
    assert noisy.max_input_length(["len=50"]) == noisy.input_length(50, True)
    assert noisy.eval_batch("len=9", 64, g).inputs.shape[1] <= noisy.max_input_length(["len=9"])


@pytest.mark.parametrize("kw,match", [(dict(format="little"), "format"),
                                      (dict(hint_start="last"), "hint_start"),
                                      (dict(hint_order="msd_first"), "hint_order"),
                                      (dict(random_spaces=1.0), "random_spaces"),
                                      (dict(operand_lengths="mixed"), "operand_lengths"),
                                      (dict(hints="yes"), "hints"),
                                      (dict(n_hints=1), "n_hints"), (dict(n_hints=103), "n_hints"),
                                      (dict(n_hints=12.0), "n_hints"),
                                      (dict(n_hints=True), "n_hints")])
def test_bad_options(kw, match):
    with pytest.raises(ValueError, match=match):
        build_task("addition", **kw)


def test_seeded_and_parse_prompt():
    task = build_task("addition", max_train_length=6)
    b1 = task.train_batch(8, torch.Generator().manual_seed(5))
    b2 = task.train_batch(8, torch.Generator().manual_seed(5))
    assert torch.equal(b1.inputs, b2.inputs)
    prompt, answer = task.parse_prompt("42 + 39")
    ex = task.read_example(prompt, answer)
    assert ex == {"a": 42, "b": 39, "sum": 81}
    assert task.decode(prompt) == "a 2 b 4 c 0 + a 9 b 3 c 0 [SEP]"
    with pytest.raises(ValueError, match="42 \\+ 39"):
        task.parse_prompt("forty two")


def test_add_digits_carries():
    a = torch.tensor([[9, 9, 9, 0]])
    b = torch.tensor([[1, 0, 0, 0]])
    c, carry_in = add_digits(a, b)
    assert c.tolist() == [[0, 0, 0, 1]] and carry_in.tolist() == [[0, 1, 1, 1]]
