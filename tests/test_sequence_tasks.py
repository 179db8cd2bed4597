"""Decoder sequence tasks (copy, reverse, sort, summation): every target against an independent
brute-force solver, masks, padding, lengths, determinism, the fixed training set and its resume.

The solvers work on plain Python lists of token *names*: the test's own name tables (below) turn
ids into names, the sequence is parsed (word, items, separator, answer, EOS, padding) and solved
with ``list``, ``reversed``, ``sorted`` with the rank table written out here, and ``int``/``%``.
"""
from __future__ import annotations

import string
from collections import Counter

import pytest
import torch

from lengen.contracts.task import masks
from lengen.model import ModelConfig, Transformer
from lengen.tasks import TASKS, build_task
from lengen.tasks.sequence import SequenceTask, prompts_and_answers

NAMES = ["copy", "reverse", "sort", "summation"]
SPECIAL = ["<pad>", "<eos>", "[SEP]"]
WORD = {"copy": "[COPY]", "reverse": "[REVERSE]", "sort": "[SORT]", "summation": "[SUM]"}
# the sort task's 50 symbols in rank order, written out independently of the task code
SORT_RANKS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN"
COPY_SYMBOLS = (string.digits + string.ascii_lowercase + string.ascii_uppercase
                + "!\"#$%&()*+,-./:;=?@\\^_`{|}~" + "αβγδεζηθικλ")
SYMBOLS = {"copy": list(COPY_SYMBOLS), "reverse": list(COPY_SYMBOLS), "sort": list(SORT_RANKS),
           "summation": list(string.digits)}
ITEMS = {"copy": set(COPY_SYMBOLS), "reverse": set(COPY_SYMBOLS), "sort": set(SORT_RANKS),
         "summation": set("123456789")}
M = {"copy": 20, "reverse": 20, "sort": 8, "summation": 8}


def vocab(name):
    return SPECIAL + [WORD[name]] + SYMBOLS[name]


def solve(name, items):
    if name == "copy":
        return list(items)
    if name == "reverse":
        return list(reversed(items))
    if name == "sort":
        return sorted(items, key=SORT_RANKS.index)
    return [str(sum(int(d) for d in items) % 10)]


def check_row(name, inputs, targets, loss_mask, eval_mask):
    """Parse one batch row, solve it, check targets and masks; returns K (number of items)."""
    names = vocab(name)
    seq = [names[i] for i in [inputs[0]] + targets]       # the full sequence: inputs[0] + targets
    assert inputs[1:] == targets[:-1]                      # targets are inputs shifted by one
    assert seq[0] == WORD[name]
    sep = seq.index("[SEP]")
    items = seq[1:sep]
    assert items and set(items) <= ITEMS[name], items
    eos = seq.index("<eos>")
    answer = seq[sep + 1:eos]
    assert answer == solve(name, items), (name, items, answer)
    assert set(seq[eos + 1:]) <= {"<pad>"}                 # right padding only
    # masks: exactly the answer + EOS targets (sequence tokens sep+1 .. eos = targets sep .. eos-1)
    expected = [sep <= t <= eos - 1 for t in range(len(targets))]
    assert loss_mask == expected and eval_mask == expected
    return len(items)


def check_batch(name, batch):
    B, T = batch.inputs.shape
    assert batch.targets.shape == batch.loss_mask.shape == batch.eval_mask.shape == (B, T)
    assert batch.inputs.dtype == torch.long and batch.loss_mask.dtype == torch.bool
    # no row is padded on every row's last column: the batch is trimmed to its longest row
    assert bool((batch.targets[:, -1] != 0).any())
    return [check_row(name, *(getattr(batch, f)[r].tolist() for f in
                              ("inputs", "targets", "loss_mask", "eval_mask"))) for r in range(B)]


def test_solver_on_hand_worked_examples():
    assert solve("copy", list("q7q$")) == list("q7q$")
    assert solve("reverse", list("q7x$")) == list("$x7q")
    assert solve("sort", list("MEF3E")) == list("3EEFM")
    assert solve("sort", list("Aa0")) == list("0aA")          # rank, not ASCII order
    assert solve("summation", list("331")) == ["7"] and solve("summation", list("55")) == ["0"]


@pytest.mark.parametrize("name", NAMES)
def test_eval_targets_match_bruteforce(name):
    task = build_task(name)
    for seed in range(2):
        gen = torch.Generator().manual_seed(seed)
        for k in (1, 2, 3, 5, 8, 9, 13, 20, 21, 40, 77, 100, 150):
            batch = task.eval_batch(f"len={k}", 6, gen)
            assert check_batch(name, batch) == [k] * 6
            assert batch.inputs.shape[1] == task.input_length(k)   # one length: no padding


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("train_size", [None, 300])
def test_train_batches_match_bruteforce_and_range(name, train_size):
    task = build_task(name, train_size=train_size)
    gen = torch.Generator().manual_seed(1)
    seen = Counter()
    for _ in range(30):
        seen.update(check_batch(name, task.train_batch(16, gen)))
    assert set(seen) <= set(range(2, M[name] + 1))
    assert len(seen) >= M[name] - 1 - 1       # 480 draws over <= 19 lengths miss at most one


def test_padding_is_right_and_never_scored():
    task = build_task("copy", max_train_length=12)
    batch = task.train_batch(64, torch.Generator().manual_seed(0))
    lengths = check_batch("copy", batch)
    assert len(set(lengths)) > 3                           # a mixed-length batch
    pad = batch.inputs == 0
    assert bool(pad.any())
    assert not bool((batch.loss_mask & (batch.targets == 0)).any())
    assert not bool((batch.eval_mask & pad).any())
    # padding only after a row's real tokens: once a row's input is PAD it stays PAD
    assert torch.equal(pad.long().cummax(1).values.bool(), pad)


@pytest.mark.parametrize("name", ["copy", "addition"])
@pytest.mark.parametrize("train_size", [None, 40])
def test_loss_on_all_trains_on_every_real_token_and_scores_the_answer(name, train_size):
    """loss_on='all' (one reading of Zhou et al. 2024's causal language modelling): the same
    data, the loss on every target up to and including EOS, never on padding; the eval mask and
    evaluation batches unchanged."""
    kw = {"max_train_length": 6, "max_eval_length": 8, "train_size": train_size}
    answer, whole = build_task(name, **kw), build_task(name, loss_on="all", **kw)
    a = answer.train_batch(32, torch.Generator().manual_seed(3))
    w = whole.train_batch(32, torch.Generator().manual_seed(3))
    assert torch.equal(a.inputs, w.inputs) and torch.equal(a.targets, w.targets)
    assert torch.equal(a.eval_mask, w.eval_mask) and torch.equal(a.loss_mask, a.eval_mask)
    real = w.targets != 0                                    # every target but the padding
    assert torch.equal(w.loss_mask, real)
    assert bool((w.loss_mask & ~a.loss_mask).any())          # the prompt is in the loss now
    ea = answer.eval_batch("len=7", 4, torch.Generator().manual_seed(5))
    ew = whole.eval_batch("len=7", 4, torch.Generator().manual_seed(5))
    assert all(torch.equal(getattr(ea, f), getattr(ew, f))
               for f in ("inputs", "targets", "loss_mask", "eval_mask"))
    masks(whole)                                            # the task contract holds for it
    with pytest.raises(ValueError, match="loss_on 'prompt'.*Valid: answer, all"):
        build_task(name, loss_on="prompt")


@pytest.mark.parametrize("name", NAMES)
def test_train_lengths_uniform(name):
    for train_size in (None, 4000):
        task = build_task(name, train_size=train_size)
        gen = torch.Generator().manual_seed(0)
        counts = Counter(k for _ in range(125) for k in check_lengths(task, gen))
        support = range(2, M[name] + 1)
        assert set(counts) == set(support)
        expected = 125 * 32 / len(support)
        # +-6 sigma of a binomial count: a wrong distribution (e.g. 1..M or 2..M-1) fails
        sigma = (expected * (1 - 1 / len(support))) ** 0.5
        assert all(abs(c - expected) < 6 * sigma for c in counts.values()), counts


def check_lengths(task, gen):
    batch = task.train_batch(32, gen)
    sep = (batch.inputs == 2).long().argmax(1)            # [SEP] index = K + 1
    return (sep - 1).tolist()


def test_custom_ranges_and_default_splits():
    task = build_task("copy")
    assert task.splits() == [f"len={k}" for k in range(2, 101)]
    assert build_task("sort").splits() == [f"len={k}" for k in range(2, 41)]
    small = build_task("summation", min_length=3, max_train_length=5, max_eval_length=7)
    assert small.splits() == ["len=3", "len=4", "len=5", "len=6", "len=7"]
    assert small.train_lengths() == (3, 5)
    gen = torch.Generator().manual_seed(0)
    assert {k for _ in range(40) for k in check_lengths(small, gen)} == {3, 4, 5}


@pytest.mark.parametrize("name", NAMES)
def test_determinism_per_seed(name):
    def draw(seed, **kw):
        task = build_task(name, **kw)
        gen = torch.Generator().manual_seed(seed)
        return [task.train_batch(8, gen), task.train_batch(8, gen),
                task.eval_batch("len=30", 8, gen)]

    for kw in ({}, {"train_size": 50}):
        a, b, c = draw(3, **kw), draw(3, **kw), draw(4, **kw)
        for x, y in zip(a, b):
            for f in ("inputs", "targets", "loss_mask", "eval_mask"):
                assert torch.equal(getattr(x, f), getattr(y, f))
        assert not torch.equal(a[2].inputs, c[2].inputs)


@pytest.mark.parametrize("name", NAMES)
def test_vocabulary_layout(name):
    task = build_task(name)
    assert list(task.vocab) == vocab(name)
    assert task.vocab_size == len(vocab(name)) and task.first_symbol == 4
    assert (TASKS[name] is type(task)) and isinstance(task, SequenceTask) and task.causal
    assert task.decode([3, 0, 1, 2]) == f"{WORD[name]} <pad> <eos> [SEP]"
    assert task.encode_text(task.decode(range(task.vocab_size))).tolist() == list(
        range(task.vocab_size))
    with pytest.raises(ValueError, match="unknown token 'nope'"):
        task.encode_text("1 nope")


@pytest.mark.parametrize("name", NAMES)
def test_max_input_length_is_the_longest_prompt_plus_answer(name):
    task = build_task(name, max_train_length=6, max_eval_length=25)
    gen = torch.Generator().manual_seed(0)

    def width(k):          # model input = sequence without its final EOS
        return task.eval_batch(f"len={k}", 1, gen).inputs.shape[1]

    answer = {"summation": lambda k: 1}.get(name, lambda k: k)
    for k in (1, 6, 7, 25):
        assert width(k) == k + 2 + answer(k)               # word, items, SEP, answer
    train = max(width(k) for k in range(2, 7))
    assert task.max_input_length([]) == train
    assert task.max_input_length(["len=20", "len=9"]) == width(20)
    assert task.max_input_length() == width(25)
    assert task.max_input_length(["len=60"]) == width(60)  # any K, not only default splits


def test_bad_splits_and_kwargs_are_clear_errors():
    task = build_task("copy")
    for bad in ("iid", "len=0", "len=-2", "len=2.5", "length=3", "len="):
        with pytest.raises(ValueError, match="sequence tasks such as copy take splits"):
            task.check_split(bad)
        with pytest.raises(ValueError, match="form 'len=K'"):
            task.eval_batch(bad, 2, torch.Generator())
    with pytest.raises(ValueError, match="len=K"):
        task.max_input_length(["iid"])
    cases = [({"min_length": 0}, "min_length must be >= 1"),
             ({"min_length": -3}, "min_length must be >= 1"),
             ({"min_length": 9, "max_train_length": 5}, "max_train_length must be >= 9"),
             ({"max_train_length": 20, "max_eval_length": 10}, "max_eval_length must be >= 20"),
             ({"train_size": 0}, "train_size must be >= 1"),
             ({"max_train_length": "ten"}, "max_train_length must be an integer"),
             ({"max_train_length": 7.5}, "max_train_length must be an integer"),
             ({"train_size": True}, "train_size must be an integer"),
             ({"max_len": 5}, ("unknown key 'max_len' in task.kwargs for task 'copy'. Valid keys: "
                             "dataset_seed, loss_on, max_eval_length, max_train_length, "
                             "min_length")),
             ({"dataset_seed": -1}, "task.kwargs.dataset_seed must be an integer in")]
    for kw, msg in cases:
        with pytest.raises(ValueError, match=msg):
            build_task("copy", **kw)
    assert build_task("copy", max_train_length=10.0).max_train_length == 10   # YAML floats
    with pytest.raises(ValueError, match="streams its training data"):
        task.train_set()


def test_model_check_rejects_lengths_it_cannot_encode():
    from lengen.config import resolve
    from lengen.train.loop import prepare

    base = {"model": {"posenc": "learned", "posenc_kwargs": {"max_positions": 64}, "d_model": 16,
                      "n_layers": 1, "n_heads": 2}, "task": {"name": "copy"}}
    with pytest.raises(ValueError, match="learned positional table has 64 rows"):
        prepare(resolve(base))                             # default splits reach len=100: 202
    prepare(resolve(base, ["eval.splits=[len=2, len=31]"]))   # 2 * 31 + 2 = 64 tokens fit
    with pytest.raises(ValueError, match="positions up to 65 are needed"):
        prepare(resolve(base, ["eval.splits=[len=32]"]))   # 66 tokens do not
    with pytest.raises(ValueError, match="take splits of the form 'len=K'"):
        prepare(resolve(base, ["eval.splits=[iid]"]))


# ------------------------------------------------------------------------------------------
# padding is causal: appending pad columns never changes a real token's logits
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("posenc,attention", [("nope", "softmax"), ("rope", "softmax"),
                                              ("alibi", "softmax"), ("learned", "softmax"),
                                              ("rope", "fot"), ("nope", "tra")])
def test_padding_never_changes_real_outputs(posenc, attention):
    task = build_task("copy", max_train_length=10)
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=task.vocab_size, d_model=32, n_layers=2, n_heads=2,
                                    posenc=posenc, attention=attention)).eval()
    batch = task.train_batch(12, torch.Generator().manual_seed(0))
    real = batch.inputs != 0
    real[:, 0] = True                                      # (the word token is never PAD)
    with torch.no_grad():
        ref = model(batch.inputs)
        for extra in (1, 7):
            padded = torch.cat([batch.inputs, torch.zeros(12, extra, dtype=torch.long)], 1)
            got = model(padded)[:, :batch.inputs.shape[1]]
            torch.testing.assert_close(got[real], ref[real], rtol=1e-5, atol=1e-5)
        # and each row alone (no padding at all) gives the same logits as inside the batch
        for r in range(3):
            n = int(real[r].sum())
            alone = model(batch.inputs[r:r + 1, :n])[0]
            torch.testing.assert_close(alone, ref[r, :n], rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------
# generation plumbing: prompts and answers
# ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_prompts_and_answers_split_every_row(name):
    task = build_task(name)
    batch = task.train_batch(10, torch.Generator().manual_seed(2))
    prompts, answers = prompts_and_answers(batch)
    names = vocab(name)
    for r, (p, a) in enumerate(zip(prompts, answers)):
        assert batch.inputs[r, :len(p)].tolist() == p.tolist()     # the row's own prompt
        p, a = [names[i] for i in p.tolist()], [names[i] for i in a.tolist()]
        assert p[0] == WORD[name] and p[-1] == "[SEP]" and "[SEP]" not in p[:-1]
        assert a[-1] == "<eos>" and a[:-1] == solve(name, p[1:-1])
    with pytest.raises(ValueError, match="no scored answer"):
        prompts_and_answers(_no_mask_batch())


def _no_mask_batch():
    from lengen.tasks.base import Batch

    z = torch.zeros(1, 4, dtype=torch.long)
    return Batch(z, z, z.bool(), z.bool())


def test_examples_are_the_evaluated_sequences():
    from lengen.tasks.sequence.base import seeded_eval_batches

    task = build_task("reverse")
    prompts, answers = task.examples("len=7", 10, seed=5, batch_size=4)
    assert len(prompts) == len(answers) == 10
    batches = list(seeded_eval_batches(task, "len=7", 10, 4, 5))
    full = torch.cat([torch.cat([b.inputs[:, :1], b.targets], 1) for b in batches])
    for r in range(10):
        assert torch.cat([prompts[r], answers[r]]).tolist() == full[r].tolist()
    again, _ = task.examples("len=7", 10, seed=5, batch_size=4)
    assert all(torch.equal(x, y) for x, y in zip(prompts, again))
    with pytest.raises(ValueError, match="len=K"):
        task.examples("iid", 2, seed=0)


def test_parse_prompt():
    copy, sort, summ = build_task("copy"), build_task("sort"), build_task("summation")
    p, a = copy.parse_prompt("q 7 q $")
    assert copy.decode(p) == "[COPY] q 7 q $ [SEP]" and copy.decode(a) == "q 7 q $ <eos>"
    p2, a2 = copy.parse_prompt("[COPY] q 7 q $ [SEP]")
    assert torch.equal(p, p2) and torch.equal(a, a2)
    assert sort.decode(sort.parse_prompt("M E F 3 E")[1]) == "3 E E F M <eos>"
    assert summ.decode(summ.parse_prompt("[SUM] 3 3 1 [SEP]")[1]) == "7 <eos>"
    with pytest.raises(ValueError, match="takes prompt items from: 1 2 3"):
        summ.parse_prompt("3 0 1")
    with pytest.raises(ValueError, match="takes prompt items from: 0 1 2 .* got <eos>"):
        sort.parse_prompt("a <eos>")
    with pytest.raises(ValueError, match="unknown token 'Z'"):
        sort.parse_prompt("a Z")                             # Z is not one of sort's 50 symbols
    with pytest.raises(ValueError, match="must end with \\[SEP\\]"):
        copy.parse_prompt("[COPY] a b")
    with pytest.raises(ValueError, match="no items"):
        copy.parse_prompt("")


# ------------------------------------------------------------------------------------------
# the fixed training set: epochs, permutations, exact resume from the task state
# ------------------------------------------------------------------------------------------
def rows_of(batch):
    full = torch.cat([batch.inputs[:, :1], batch.targets], 1)
    return [tuple(t for t in r if t != 0) for r in full.tolist()]


def test_fixed_set_is_read_once_per_epoch_in_a_new_order():
    N = 90
    task = build_task("copy", train_size=N, max_train_length=6)
    data = {tuple(t for t in r if t != 0) for r in task.train_set()[0].long().tolist()}
    assert len(data) > 80                                  # (a few duplicates are allowed)
    gen = torch.Generator().manual_seed(0)
    order = []
    for _ in range(9):                                     # 9 x 20 = 180 = two epochs exactly
        order += rows_of(task.train_batch(20, gen))
    assert task.state_dict()["epoch"] == 2 and task.state_dict()["index"] == N
    first, second = order[:N], order[N:]
    assert Counter(first) == Counter(second)               # each example once per epoch
    assert set(first) == data
    assert first != second                                 # a new permutation
    # the set is a function of dataset_seed, not of the training generator
    other = build_task("copy", train_size=N, max_train_length=6)
    assert torch.equal(other.train_set()[0], task.train_set()[0])
    reseeded = build_task("copy", train_size=N, max_train_length=6, dataset_seed=1)
    assert not torch.equal(reseeded.train_set()[0], task.train_set()[0])


def test_state_dict_resumes_exactly_mid_epoch():
    def fresh():
        return build_task("sort", train_size=50), torch.Generator().manual_seed(7)

    task, gen = fresh()
    straight = [rows_of(task.train_batch(16, gen)) for _ in range(9)]

    task, gen = fresh()
    for _ in range(4):                                     # 64 rows: inside epoch 2
        task.train_batch(16, gen)
    state, gen_state = task.state_dict(), gen.get_state()
    assert state == {"train_size": 50, "dataset_seed": 0, "epoch": 2, "index": 14,
                     "perm_seed": state["perm_seed"]}
    import json

    state = json.loads(json.dumps(state))                  # plain ints: JSON-safe
    resumed, gen = fresh()
    resumed.load_state_dict(state)
    gen.set_state(gen_state)
    assert [rows_of(resumed.train_batch(16, gen)) for _ in range(5)] == straight[4:]
    # a state from another training set is refused; {} restarts; a streamed task has {}
    with pytest.raises(ValueError, match=r"\(train_size, dataset_seed\) = \(50, 0\)"):
        build_task("sort", train_size=60).load_state_dict(state)
    with pytest.raises(ValueError, match="streams its data"):
        build_task("sort").load_state_dict(state)
    assert build_task("sort").state_dict() == {}
    resumed.load_state_dict({})
    assert resumed.state_dict()["epoch"] == 0


def test_epoch_reader_spans_epochs_and_resumes():
    from lengen.tasks.epochs import EpochReader

    gen = torch.Generator().manual_seed(0)
    reader = EpochReader(5)
    idx = reader.next_indices(7, gen).tolist()              # one epoch + 2 of the next
    assert sorted(idx[:5]) == [0, 1, 2, 3, 4] and reader.epoch == 2 and reader.index == 2
    state, gstate = reader.state_dict(), gen.get_state()
    rest = reader.next_indices(13, gen).tolist()            # 3 + 5 + 5: epochs 2, 3, 4
    assert sorted(idx[5:] + rest[:3]) == [0, 1, 2, 3, 4] and sorted(rest[3:8]) == [0, 1, 2, 3, 4]
    again = EpochReader(5)
    again.load_state_dict(state)
    gen.set_state(gstate)
    assert again.next_indices(13, gen).tolist() == rest
    with pytest.raises(ValueError, match=">= 1 example"):
        EpochReader(0)
