"""Chomsky-hierarchy tasks: every target against an independent brute-force solver.

The solvers below work on plain Python lists and share no code with ``lengen.tasks.chomsky``: they
parse the input tokens a batch shows the model (checking that the input is a well-formed instance
of the task), solve it with Python (``eval``, lists as stacks, ``int(..., 2)``, ``math.isqrt``,
``sorted``) and return the expected output classes and how many of them accuracy should score. The
solvers are themselves checked on hand-worked examples first.
"""
from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from lengen.tasks import TASKS, build_task
from lengen.tasks.chomsky import CHOMSKY_TASKS, ChomskyTask

NAMES = [
    "even_pairs", "modular_arithmetic", "parity_check", "cycle_navigation",
    "stack_manipulation", "reverse_string", "modular_arithmetic_brackets", "solve_equation",
    "duplicate_string", "missing_duplicate_string", "odds_first", "binary_addition",
    "binary_multiplication", "compute_sqrt", "bucket_sort",
]

# (input symbols, output classes) of the reference tasks (the notes' table)
REFERENCE_SIZES = {
    "even_pairs": (2, 2), "modular_arithmetic": (9, 5), "parity_check": (2, 2),
    "cycle_navigation": (3, 5), "stack_manipulation": (5, 3), "reverse_string": (2, 2),
    "modular_arithmetic_brackets": (11, 5), "solve_equation": (11, 5), "duplicate_string": (2, 2),
    "missing_duplicate_string": (4, 2), "odds_first": (2, 2), "binary_addition": (3, 3),
    "binary_multiplication": (3, 3), "compute_sqrt": (2, 2), "bucket_sort": (5, 5),
}

# input and output length for a requested length n (the reference's output_length)
INPUT_LEN = {"modular_arithmetic": lambda n: n if n % 2 else n - 1}
OUTPUT_LEN = {
    "stack_manipulation": lambda n: n + 1, "reverse_string": lambda n: n,
    "duplicate_string": lambda n: 2 * n, "odds_first": lambda n: n,
    "binary_addition": lambda n: n + 1, "binary_multiplication": lambda n: n,
    "compute_sqrt": lambda n: (n + 1) // 2, "bucket_sort": lambda n: n,
}


def in_len(name, n):
    return INPUT_LEN.get(name, lambda n: n)(n)


def out_len(name, n):
    return OUTPUT_LEN.get(name, lambda n: 1)(n)


# ------------------------------------------------------------------------------------------
# brute-force solvers: input tokens (task-local ids) -> (expected output classes, #scored)
# ------------------------------------------------------------------------------------------
def bits(xs):
    assert set(xs) <= {0, 1}, xs
    return xs


def solve_even_pairs(x):
    bits(x)
    return [sum(a != b for a, b in zip(x, x[1:])) % 2], 1


def solve_parity(x):
    return [sum(bits(x)) % 2], 1


def solve_cycle(x):
    assert set(x) <= {0, 1, 2}
    pos = 0
    for t in x:
        pos += {0: -1, 1: 0, 2: +1}[t]
    return [pos % 5], 1


def solve_modular_arithmetic(x):
    assert len(x) % 2 == 1
    text = ""
    for i, t in enumerate(x):
        if i % 2 == 0:
            assert 0 <= t < 5, x
            text += str(t)
        else:
            text += {5: "+", 6: "-", 7: "*"}[t]
    return [eval(text) % 5], 1


def solve_stack(x):
    n = len(x)
    k = 0
    while k < n and x[k] in (0, 1):
        k += 1
    actions = x[k:]
    assert k >= 1 and set(actions) <= {2, 3, 4}, x
    assert n == 1 or len(actions) >= 1, "the reference always has at least one action"
    stack = list(x[:k])                         # bottom-to-top
    for a in actions:
        if a == 2:
            if stack:
                stack.pop()
        else:
            stack.append(a - 3)
    out = stack[::-1] + [2]
    return out + [0] * (n + 1 - len(out)), len(out)


def parse_bracketed(text):
    """Value of an expression of the brackets grammar (d, -d, (d), (-d), (A op B)); asserts the
    text is exactly one such expression."""
    def expr(i):
        if text[i].isdigit():
            return int(text[i]), i + 1, True
        if text[i] == "-":
            assert text[i + 1].isdigit(), text
            return -int(text[i + 1]), i + 2, True
        assert text[i] == "(", text
        left, j, simple = expr(i + 1)
        if text[j] == ")":
            assert simple, f"only d and -d may stand alone in brackets: {text}"
            return left, j + 1, False
        op = text[j]
        right, k, _ = expr(j + 1)
        assert text[k] == ")", text
        value = {"+": left + right, "-": left - right, "*": left * right}[op]
        return value, k + 1, False

    value, end, _ = expr(0)
    assert end == len(text), text
    return value


def solve_brackets(x):
    text = "".join("01234+-*()"[t] for t in x)
    value = parse_bracketed(text) % 5
    assert value == eval(text) % 5                  # Python agrees with the grammar's reading
    return [value], 1


def solve_equation(x):
    if len(x) < 3:
        assert x == [0] * len(x)
        return [0], 1
    text = "".join("01234+-()x="[t] for t in x)
    lhs, rhs = text.split("=")
    assert lhs.count("x") == 1 and rhs.isdigit() and len(rhs) == 1, text
    sols = [v for v in range(5) if parse_bracketed(lhs.replace("x", str(v))) % 5 == int(rhs)]
    assert len(sols) == 1, (text, sols)
    return sols, 1


def solve_missing_duplicate(x):
    n = len(x)
    if n == 1:
        assert x == [1]
        return [1], 1
    h = n // 2
    body = x
    if n % 2:
        assert x[-1] == 3
        body = x[:-1]
    assert len(body) == 2 * h and body.count(2) == 1 and 3 not in body, x
    hole = body.index(2)
    twin = (hole + h) % (2 * h)
    filled = body[:hole] + [body[twin]] + body[hole + 1:]
    assert filled[:h] == filled[h:]
    return [body[twin]], 1


def le_int(bs):
    return int("".join(map(str, bits(bs)))[::-1], 2)


def le_bits(v):
    return [int(c) for c in bin(v)[2:][::-1]]


def split_binary(x):
    assert x.count(2) == 1, x
    i = x.index(2)
    a, b = x[:i], x[i + 1:]
    assert a and b, x
    va, vb = le_int(a), le_int(b)
    assert va >= 1 and vb >= 1, x
    return va, vb


def solve_addition(x):
    n = len(x)
    if n <= 2:
        v = le_int(x)
        assert v <= 2 ** n - 2
        res = le_bits(v)                            # [0] for zero
    else:
        va, vb = split_binary(x)
        res = le_bits(va + vb)
    return res + [2] + [0] * (n - len(res)), len(res) + 1


def solve_multiplication(x):
    n = len(x)
    if n <= 2:
        assert le_int(x) <= 2 ** n - 2
        return [0] * (n - 1) + [2], n
    va, vb = split_binary(x)
    res = le_bits(va * vb)
    return res + [2] + [0] * (n - 1 - len(res)), len(res) + 1


def solve_sqrt(x):
    n = len(x)
    v = int("".join(map(str, bits(x))), 2)
    assert v >= 1
    root = bin(math.isqrt(v))[2:].zfill((n + 1) // 2)
    assert len(root) == (n + 1) // 2
    return [int(c) for c in root], (n + 1) // 2


def whole(fn):
    def solve(x):
        out = fn(x)
        return out, len(out)
    return solve


SOLVERS = {
    "even_pairs": solve_even_pairs,
    "modular_arithmetic": solve_modular_arithmetic,
    "parity_check": solve_parity,
    "cycle_navigation": solve_cycle,
    "stack_manipulation": solve_stack,
    "reverse_string": whole(lambda x: bits(x)[::-1]),
    "modular_arithmetic_brackets": solve_brackets,
    "solve_equation": solve_equation,
    "duplicate_string": whole(lambda x: bits(x) + x),
    "missing_duplicate_string": solve_missing_duplicate,
    "odds_first": whole(lambda x: bits(x)[1::2] + x[0::2]),
    "binary_addition": solve_addition,
    "binary_multiplication": solve_multiplication,
    "compute_sqrt": solve_sqrt,
    "bucket_sort": whole(lambda x: sorted(x)),
}


def toks(s, table):
    return [table.index(c) for c in s.replace(" ", "")]


def test_solvers_on_worked_examples():
    """The oracles themselves, on examples worked by hand (several from the papers' code)."""
    assert solve_even_pairs(toks("0101001", "01")) == ([1], 1)
    assert solve_even_pairs(toks("001110", "01")) == ([0], 1)
    assert solve_parity(toks("1010100", "01")) == ([1], 1)
    assert solve_cycle([2, 0, 1, 0, 0]) == ([3], 1)
    assert solve_modular_arithmetic(toks("1-1-1", "01234+-*")) == ([4], 1)
    assert solve_modular_arithmetic(toks("1+2*3", "01234+-*")) == ([2], 1)
    assert solve_modular_arithmetic(toks("0*1+4*3-2", "01234+-*")) == ([0], 1)
    assert solve_stack([0, 1, 1, 0, 4, 2, 2]) == ([1, 1, 0, 2, 0, 0, 0, 0], 4)
    assert solve_stack([1, 1, 0, 2, 2, 2]) == ([2, 0, 0, 0, 0, 0, 0], 1)
    assert solve_brackets(toks("(1-(4+(-2)))", "01234+-*()")) == ([4], 1)
    assert solve_brackets(toks("((-2)*3)", "01234+-*()")) == ([4], 1)
    with pytest.raises(AssertionError):
        solve_brackets(toks("((1+2))", "01234+-*()"))      # not producible by the grammar
    assert solve_equation(toks("(x-(-2))=0", "01234+-()x=")) == ([3], 1)
    assert solve_missing_duplicate(toks("01100210", "0123")) == ([1], 1)
    assert solve_missing_duplicate(toks("1011213", "0123")) == ([0], 1)
    assert SOLVERS["odds_first"](toks("00110101", "01")) == (toks("01110100", "01"), 8)
    assert solve_addition(toks("001 2 01101", "012")) == (toks("01011 2 0000", "012"), 6)
    assert solve_addition(toks("1001 2 000001", "012")) == (toks("100101 2 00000", "012"), 7)
    assert solve_multiplication(toks("01001 2 011", "012")) == (toks("0011011 2 0", "012"), 8)
    assert solve_multiplication(toks("1001 2 000001", "012")) == (toks("000001001 2 0", "012"), 10)
    assert solve_sqrt(toks("100101", "01")) == ([1, 1, 0], 3)
    assert solve_sqrt(toks("111", "01")) == ([1, 0], 2)
    assert SOLVERS["bucket_sort"]([1, 0, 2, 0, 4, 1, 1, 2]) == ([0, 0, 1, 1, 1, 2, 2, 4], 8)


# ------------------------------------------------------------------------------------------
# batches vs solvers
# ------------------------------------------------------------------------------------------
def check_batch(task, name, batch, n=None):
    """Layout, masks, vocabulary and every target of one batch; returns the input length n."""
    B, T = batch.inputs.shape
    for t in (batch.targets, batch.loss_mask, batch.eval_mask):
        assert t.shape == (B, T)
    V = task.vocab_size
    assert int(batch.inputs.min()) >= 0 and int(batch.inputs.max()) < V
    assert int(batch.targets.min()) >= 0 and int(batch.targets.max()) < V
    # input length L: the tokens before the first placeholder (identical in every row)
    is_ph = batch.inputs == task.placeholder
    L = int(is_ph[0].long().argmax())
    assert bool(is_ph[:, L:].all()) and not bool(is_ph[:, :L].any())
    assert int(batch.inputs[:, :L].max()) < task.input_size
    if n is not None:
        assert L == in_len(name, n)
    K = T - L
    assert K == out_len(name, n if n is not None else L)
    out_region = torch.arange(T) >= L
    assert torch.equal(batch.loss_mask, out_region.expand(B, T))
    assert not bool(batch.eval_mask[:, :L].any())
    y = batch.targets[:, L:] - task.output_offset
    assert int(y.min()) >= 0 and int(y.max()) < task.output_size
    for row in range(B):
        expected, scored = SOLVERS[name](batch.inputs[row, :L].tolist())
        assert y[row].tolist() == expected, (name, L, batch.inputs[row, :L].tolist())
        assert batch.eval_mask[row, L:].tolist() == [True] * scored + [False] * (K - scored)
    return L


LENGTHS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 16, 21, 40, 41, 64, 99, 128, 257, 500]


@pytest.mark.parametrize("name", NAMES)
def test_targets_match_bruteforce(name):
    task = build_task(name)
    for seed in range(3):
        gen = torch.Generator().manual_seed(seed)
        for n in LENGTHS:
            check_batch(task, name, task.eval_batch(f"len={n}", 8, gen), n)


@pytest.mark.parametrize("name", NAMES)
def test_train_batches_match_bruteforce_and_range(name):
    task = build_task(name, max_train_length=12, max_eval_length=20)
    gen = torch.Generator().manual_seed(5)
    allowed = {in_len(name, n) for n in range(1, 13)}
    seen = set()
    for _ in range(40):
        seen.add(check_batch(task, name, task.train_batch(4, gen)))
    assert seen <= allowed
    assert len(seen) >= len(allowed) - 2        # 40 draws of 12 lengths miss <= 2 (p < 1e-3)


def test_train_lengths_uniform_over_one_to_n():
    task = build_task("parity_check", max_train_length=6, max_eval_length=10)
    gen = torch.Generator().manual_seed(0)
    counts = Counter(task.train_batch(2, gen).inputs.shape[1] - 1 for _ in range(600))
    assert set(counts) == set(range(1, 7))
    assert all(70 <= c <= 130 for c in counts.values()), counts     # expected 100 each


# ------------------------------------------------------------------------------------------
# interface, vocabulary, splits, determinism
# ------------------------------------------------------------------------------------------
def test_registry_holds_the_fifteen_encoder_tasks():
    assert {n for n, cls in TASKS.items() if issubclass(cls, ChomskyTask)} == set(NAMES)
    assert set(CHOMSKY_TASKS) == {TASKS[n] for n in NAMES}
    for n in NAMES:
        task = build_task(n)
        assert task.name == n and task.causal is False


@pytest.mark.parametrize("name", NAMES)
def test_vocabulary_layout(name):
    task = build_task(name)
    n_in, n_out = REFERENCE_SIZES[name]
    assert (task.input_size, task.output_size) == (n_in, n_out)
    assert task.output_offset == n_in
    assert task.placeholder == n_in + n_out
    assert task.vocab_size == n_in + n_out + 1
    assert task.output_slice == slice(n_in, n_in + n_out)


@pytest.mark.parametrize("name", NAMES)
def test_determinism_per_seed(name):
    task = build_task(name)

    def draw(seed):
        gen = torch.Generator().manual_seed(seed)
        return [task.train_batch(8, gen), task.eval_batch("len=64", 8, gen)]

    a, b, c = draw(3), draw(3), draw(4)
    for x, y in zip(a, b):
        for f in ("inputs", "targets", "loss_mask", "eval_mask"):
            assert torch.equal(getattr(x, f), getattr(y, f))
    assert not torch.equal(a[1].inputs, c[1].inputs)


def test_splits_and_split_parsing():
    task = build_task("reverse_string")
    assert task.splits() == [f"len={k}" for k in range(41, 501)]
    small = build_task("reverse_string", max_train_length=5, max_eval_length=8)
    assert small.splits() == ["len=6", "len=7", "len=8"]
    for ok in ("len=1", "len=41", "len=1000"):
        task.check_split(ok)
    for bad in ("len=0", "len=-3", "len=5.5", "length=5", "iid", "len="):
        with pytest.raises(ValueError):
            task.check_split(bad)
        with pytest.raises(ValueError):
            task.eval_batch(bad, 2, torch.Generator())
    batch = task.eval_batch("len=1000", 2, torch.Generator().manual_seed(0))
    assert batch.inputs.shape == (2, 2000)
    with pytest.raises(ValueError):
        build_task("reverse_string", max_train_length=40, max_eval_length=40)
    batches = list(task.eval_batches("len=50", 10, 4, 0))
    assert [b.inputs.shape[0] for b in batches] == [4, 4, 2]


@pytest.mark.parametrize("name", NAMES)
def test_max_input_length_counts_placeholders(name):
    task = build_task(name, max_train_length=10, max_eval_length=30)
    gen = torch.Generator().manual_seed(0)

    def width(n):
        return task.eval_batch(f"len={n}", 1, gen).inputs.shape[1]

    train = max(width(n) for n in range(1, 11))
    assert task.max_input_length([]) == train
    assert task.max_input_length(["len=20", "len=17"]) == max(train, width(20), width(17))
    assert task.max_input_length() == max(width(n) for n in range(1, 31))
    assert task.max_input_length() == max(in_len(name, n) + out_len(name, n) for n in range(1, 31))


# ------------------------------------------------------------------------------------------
# sampling distribution (what a solver cannot see)
# ------------------------------------------------------------------------------------------
def test_modular_arithmetic_uses_every_operator_at_every_length():
    """Regression for the reference's operator generator, emptied after the first length."""
    task = build_task("modular_arithmetic")
    gen = torch.Generator().manual_seed(0)
    for n in (5, 41, 101, 5):
        ops = set(task.eval_batch(f"len={n}", 64, gen).inputs[:, 1:n:2].flatten().tolist())
        assert ops == {5, 6, 7}, (n, ops)
    plus_only = build_task("modular_arithmetic", operators="+")
    ops = set(plus_only.eval_batch("len=41", 16, gen).inputs[:, 1:41:2].flatten().tolist())
    assert ops == {5}
    with pytest.raises(ValueError):
        build_task("modular_arithmetic", operators="+/")


def test_brackets_operators_follow_mult():
    gen = torch.Generator().manual_seed(0)
    with_mult = build_task("modular_arithmetic_brackets").eval_batch("len=101", 32, gen).inputs
    assert {5, 6, 7} <= set(with_mult.flatten().tolist())
    without = build_task("modular_arithmetic_brackets", mult=False).eval_batch("len=101", 32, gen)
    assert 7 not in set(without.inputs.flatten().tolist())


@pytest.mark.parametrize("name", ["even_pairs", "modular_arithmetic", "parity_check",
                                  "cycle_navigation", "modular_arithmetic_brackets",
                                  "solve_equation", "missing_duplicate_string"])
def test_every_class_occurs(name):
    task = build_task(name)
    batch = task.eval_batch("len=41", 400, torch.Generator().manual_seed(0))
    classes = set((batch.targets[:, -1] - task.output_offset).tolist())
    assert classes == set(range(task.output_size))


def test_stack_and_operand_splits_cover_their_range():
    gen = torch.Generator().manual_seed(0)
    x = build_task("stack_manipulation").eval_batch("len=10", 400, gen).inputs[:, :10]
    stack_len = (x >= 2).long().argmax(1)                    # first action
    assert set(stack_len.tolist()) == set(range(1, 10))
    for name in ("binary_addition", "binary_multiplication"):
        x = build_task(name).eval_batch("len=10", 400, gen).inputs[:, :10]
        len_a = (x == 2).long().argmax(1)
        assert set(len_a.tolist()) == set(range(1, 9))
    x = build_task("missing_duplicate_string").eval_batch("len=9", 400, gen).inputs[:, :8]
    assert set((x == 2).long().argmax(1).tolist()) == set(range(8))


def test_solve_equation_hides_a_residue_like_the_reference():
    """The reference hides the first residue at or after a uniform position (cyclically), so a
    residue is hidden with probability (its gap to the previous residue) / length, not uniformly.
    The mean hidden gap tells the two rules apart (seeded, so not flaky)."""
    n, L, B = 20, 18, 4000
    x = build_task("solve_equation").eval_batch(f"len={n}", B, torch.Generator().manual_seed(0))
    got = reference = uniform = 0.0
    for row in x.inputs[:, :L].tolist():
        residues = [i for i, v in enumerate(row) if v < 5 or v == 9]
        gaps = {p: (p - residues[i - 1]) % L or L for i, p in enumerate(residues)}
        got += gaps[row.index(9)] / B
        reference += sum(g * g for g in gaps.values()) / L / B
        uniform += sum(gaps.values()) / len(gaps) / B
    assert abs(got - reference) < 0.15 and abs(got - uniform) > 0.25, (got, reference, uniform)


# input ids a long batch must show: all declared ids except the reference's never-sampled ones
UNUSED_INPUT_IDS = {"modular_arithmetic": {8}, "modular_arithmetic_brackets": {10}}


@pytest.mark.parametrize("name", NAMES)
def test_input_symbols_cover_the_declared_range(name):
    task = build_task(name)
    batch = task.eval_batch("len=41", 200, torch.Generator().manual_seed(0))
    used = set(batch.inputs[:, :in_len(name, 41)].flatten().tolist())
    assert used == set(range(task.input_size)) - UNUSED_INPUT_IDS.get(name, set())


def test_brackets_split_is_uniform():
    """(A op B) with len(A) uniform in 1..n-4: read len(A) off the top-level operator."""
    n, B = 9, 2000
    x = build_task("modular_arithmetic_brackets").eval_batch(f"len={n}", B,
                                                             torch.Generator().manual_seed(0))
    counts = Counter()
    for row in x.inputs[:, :n].tolist():
        depth = 0
        for i, t in enumerate(row):
            depth += (t == 8) - (t == 9)
            binary = row[i - 1] < 5 or row[i - 1] == 9          # not a unary minus
            if depth == 1 and t in (5, 6, 7) and binary:
                counts[i - 1] += 1
                break
    assert set(counts) == {1, 2, 3, 4, 5}
    assert all(320 <= c <= 480 for c in counts.values()), counts          # expected 400 each
