"""Position coupling (Cho et al. 2024) and Abacus (McLeish et al. 2024) samplers
(lengen/samplers/digits.py): positions on hand-built sequences in both formats with and without
hints and blanks, against an independent reading of the decoded text; training offsets from the
generator; deterministic evaluation; causality; composition with learned / rope / fire; generation
from the model's own tokens; resolve-time filling from the task and its errors."""
from __future__ import annotations

import pytest
import torch

import lengen
from lengen.errors import ConfigError
from lengen.eval.evaluate import eval_stream, evaluate
from lengen.eval.generation import exact_match_generated
from lengen.samplers import SAMPLERS, build_sampler
from lengen.samplers.digits import AbacusSampler, CouplingSampler
from lengen.tasks import build_task
from lengen.tasks.sequence.base import EOS
from trained_weights import trained

KINDS = ["coupling", "abacus"]


def task_for(fmt="reversed", hints=False, **kw):
    return build_task("addition", max_train_length=4, max_eval_length=8, format=fmt,
                      hints=hints, hint_start="first", **kw)


def sampler_for(task, name, **kw):
    s = task.token_structure()
    return build_sampler(name, **{k: s[k] for k in ("digit_ids", "hint_ids", "blank_ids",
                                                    "max_digits")}, **kw)


def ids(task, text):
    return task.encode_text(text)[None]                                  # [1, T]


def positions(sampler, tokens, training=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    return sampler.sample(tokens.shape[1], training=training, generator=g,
                          batch_size=tokens.shape[0], tokens=tokens)


# ---- hand-built examples: 42 + 39 = 81 (n = 2, three digits per number with the zero pad) ----
CASES = [
    # format, hints, text, coupling at s = 0, abacus at k = 0
    ("reversed", False, "2 4 0 + 9 3 0 [SEP] 1 8 0",
     [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3], [1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3]),
    ("standard", False, "0 4 2 + 0 3 9 [SEP] 0 8 1",
     [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3], [1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3]),
    ("reversed", True, "a 2 b 4 c 0 + a 9 b 3 c 0 [SEP] a 1 b 8 c 0",
     [1, 1, 2, 2, 3, 3, 4, 1, 1, 2, 2, 3, 3, 4, 1, 1, 2, 2, 3, 3],
     [0, 1, 0, 2, 0, 3, 0, 0, 1, 0, 2, 0, 3, 0, 0, 1, 0, 2, 0, 3]),
    # hints ascend as written in both formats (the paper's a4b2+a3b9=a8b1, with the zero pad);
    # the positions never read which hint it is, so the old descending order ('lsd_first')
    # gets the same ones
    ("standard", True, "a 0 b 4 c 2 + a 0 b 3 c 9 [SEP] a 0 b 8 c 1",
     [1, 1, 2, 2, 3, 3, 4, 1, 1, 2, 2, 3, 3, 4, 1, 1, 2, 2, 3, 3],
     [0, 1, 0, 2, 0, 3, 0, 0, 1, 0, 2, 0, 3, 0, 0, 1, 0, 2, 0, 3]),
    ("standard", True, "c 0 b 4 a 2 + c 0 b 3 a 9 [SEP] c 0 b 8 a 1",
     [1, 1, 2, 2, 3, 3, 4, 1, 1, 2, 2, 3, 3, 4, 1, 1, 2, 2, 3, 3],
     [0, 1, 0, 2, 0, 3, 0, 0, 1, 0, 2, 0, 3, 0, 0, 1, 0, 2, 0, 3]),
    # blanks (random spaces) take the id of the digit after them; a blank before '+' closes
    ("reversed", False, "2 _ 4 0 _ _ + 9 3 _ 0 [SEP] 1 8 0",
     [1, 2, 2, 3, 4, 4, 4, 1, 2, 3, 3, 4, 1, 2, 3],
     [1, 0, 2, 3, 0, 0, 0, 1, 2, 0, 3, 0, 1, 2, 3]),
    # the EOS of a padded row closes the answer; the pad after it starts over
    ("reversed", False, "2 4 0 + 9 3 0 [SEP] 1 8 0 <eos> <pad>",
     [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1], [1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 0]),
]


@pytest.mark.parametrize("fmt,hints,text,coupled,abacus", CASES)
def test_hand_built_examples(fmt, hints, text, coupled, abacus):
    task = task_for(fmt, hints)
    tokens = ids(task, text)
    assert positions(sampler_for(task, "coupling"), tokens).tolist() == [coupled]
    assert positions(sampler_for(task, "abacus"), tokens).tolist() == [abacus]
    off = sampler_for(task, "coupling", eval_offset=5, max_position=20)
    assert positions(off, tokens).tolist() == [[p + 5 for p in coupled]]


def significance_by_reading(task, names: list[str]) -> list[int | None]:
    """Independent reading of one decoded example: the significance of every digit token (None
    for other tokens), from the text alone."""
    out, number = [None] * len(names), []
    for i, name in enumerate(names + ["+"]):
        if name.isdigit() and len(name) == 1:
            number.append(i)
        elif name in ("+", "[SEP]", "<eos>", "<pad>"):
            W = len(number)
            for r, j in enumerate(number):
                out[j] = r if task.format == "reversed" else W - 1 - r
            number = []
    return out


@pytest.mark.parametrize("fmt", ["reversed", "standard"])
@pytest.mark.parametrize("hints", [False, True])
@pytest.mark.parametrize("spaces", [0.0, 0.4])
@pytest.mark.parametrize("operand_lengths", ["equal", "independent"])
def test_equal_significance_shares_one_id(fmt, hints, spaces, operand_lengths):
    """On training batches of the task (mixed lengths, padding, blanks, operands of different
    lengths): in every row, coupling gives all digits of one significance (in a, b and the answer)
    one id, and distinct significances distinct ids; Abacus gives them the same 1-based index."""
    task = task_for(fmt, hints, random_spaces=spaces, operand_lengths=operand_lengths)
    batch = task.train_batch(48, torch.Generator().manual_seed(1))
    cp = positions(sampler_for(task, "coupling"), batch.inputs)
    ab = positions(sampler_for(task, "abacus"), batch.inputs)
    for r in range(48):
        names = task.decode(batch.inputs[r]).split()
        sig = significance_by_reading(task, names)
        ids_of: dict[int, set] = {}
        for j, s in enumerate(sig):
            if s is not None:
                ids_of.setdefault(s, set()).add(float(cp[r, j]))
                if task.format == "reversed":
                    assert ab[r, j] == s + 1
        assert all(len(v) == 1 for v in ids_of.values()), (names, ids_of)
        assert len({v.pop() for v in ids_of.values()}) == len(ids_of)
        digit = [s is not None for s in sig]
        assert all((ab[r, j] > 0) == d for j, d in enumerate(digit))


@pytest.mark.parametrize("name", KINDS)
def test_causal_prefix_positions(name):
    """The positions of a prefix are the prefix of the positions (what generation relies on)."""
    task = task_for(hints=True, random_spaces=0.3)
    s = sampler_for(task, name)
    batch = task.train_batch(16, torch.Generator().manual_seed(2))
    full = positions(s, batch.inputs)
    for t in range(1, batch.inputs.shape[1] + 1):
        assert torch.equal(positions(s, batch.inputs[:, :t]), full[:, :t])


def test_training_offsets_come_from_the_generator():
    task = task_for(hints=True)
    batch = task.train_batch(64, torch.Generator().manual_seed(3))
    base = positions(sampler_for(task, "coupling", max_position=30), batch.inputs)
    s = sampler_for(task, "coupling", max_position=30)
    a = positions(s, batch.inputs, training=True, seed=7)
    assert torch.equal(a, positions(s, batch.inputs, training=True, seed=7))
    assert not torch.equal(a, positions(s, batch.inputs, training=True, seed=8))
    shift = a - base                                    # one offset per row, the same everywhere
    assert torch.equal(shift, shift[:, :1].expand_as(shift))
    width = torch.tensor([max(len(x) for x in task.decode(row).replace("[SEP]", "+").replace(
        "<eos>", "+").replace("<pad>", "+").split("+")) for row in batch.inputs]) // 4 + 1
    assert (a.max(1).values <= 30).all() and (shift[:, 0] >= 0).all()
    # offsets spread over the whole range: many distinct values, and some row reaches id 30
    draws = torch.cat([positions(s, batch.inputs, training=True, seed=k)[:, 0]
                       - base[:, 0] for k in range(20)])
    assert len(set(draws.tolist())) > 15
    top = torch.stack([positions(s, batch.inputs, training=True, seed=k).max(1).values
                       for k in range(40)])
    assert (top == 30).any() and width.min() >= 1
    # batch mode: rows of one width share the offset
    sb = sampler_for(task, "coupling", max_position=30, offsets="batch")
    one = task.eval_batch("len=3", 8, torch.Generator().manual_seed(0)).inputs
    d = positions(sb, one, training=True, seed=4) - positions(sb, one)
    assert torch.equal(d, d[:1, :1].expand_as(d)) and d[0, 0] >= 0


def test_abacus_offset_per_batch_and_only_on_digits():
    task = task_for(hints=True)
    s = sampler_for(task, "abacus", max_k=9)
    batch = task.train_batch(32, torch.Generator().manual_seed(5))
    base = positions(s, batch.inputs)
    ks = set()
    for seed in range(30):
        p = positions(s, batch.inputs, training=True, seed=seed)
        assert torch.equal(p == 0, base == 0)                 # non-digits stay at 0
        k = (p - base)[base > 0]
        assert (k == k[0]).all()                              # one k for the whole batch
        ks.add(int(k[0]))
    assert ks <= set(range(10)) and len(ks) >= 8
    rows = sampler_for(task, "abacus", max_k=9, offsets="row")
    p = positions(rows, batch.inputs, training=True, seed=0) - base
    assert len({float(p[r][base[r] > 0][0]) for r in range(32)}) > 3


@pytest.mark.parametrize("name", KINDS)
def test_evaluation_is_deterministic_and_row_wise(name):
    task = task_for(hints=True)
    s = sampler_for(task, name)
    assert s.random_at_eval is False and s.uses_batch and s.per_instance
    b = task.eval_batch("len=6", 10, torch.Generator().manual_seed(0)).inputs
    full = positions(s, b, seed=1)
    assert torch.equal(full, positions(s, b, seed=2))         # no draw at evaluation
    for r in range(10):                                        # a row alone == in its batch
        assert torch.equal(positions(s, b[r:r + 1]), full[r:r + 1])


@pytest.mark.parametrize("name", KINDS)
def test_without_tokens_it_fails_clearly(name):
    s = sampler_for(task_for(), name)
    with pytest.raises(ValueError, match="without them"):
        s.sample(10, training=False, batch_size=2, lengths=torch.tensor([10, 10]))
    with pytest.raises(ValueError, match="tokens must be"):
        s.sample(5, training=False, tokens=torch.zeros(2, 4, dtype=torch.long))


def model_for(task, name, posenc, **pkw):
    cfg = lengen.resolve({"task": {"name": "addition",
                                   "kwargs": {"max_train_length": task.max_train_length,
                                              "max_eval_length": task.max_eval_length,
                                              "hints": task.hints, "format": task.format}},
                          "model": {"positions": name, "posenc": posenc, "d_model": 32,
                                    "n_layers": 2, "n_heads": 2, "positions_kwargs": pkw},
                          "eval": {"splits": ["len=2"]}})
    from lengen.train.loop import prepare

    torch.manual_seed(0)
    return prepare(cfg)[1]


@pytest.mark.parametrize("name", KINDS)
def test_learned_table_reads_the_coupled_ids(name):
    """With the learned scheme, the embedding added to each token is the table row of its
    sampled id, and a different offset changes the output (absolute ids)."""
    task = task_for(hints=True)
    model = model_for(task, name, "learned").eval()
    b = task.eval_batch("len=3", 4, torch.Generator().manual_seed(0)).inputs
    pos = model.sampler.sample(b.shape[1], training=False, batch_size=4, tokens=b)
    x = model.embed(b)
    want = x + model.posenc.table[pos.long()]
    torch.testing.assert_close(model.posenc.embed(x, pos), want, rtol=0, atol=0)
    with torch.no_grad():
        torch.testing.assert_close(model(b), model(b, positions=pos), rtol=0, atol=0)
        assert (model(b) - model(b, positions=pos + 1)).abs().max() > 1e-4


@pytest.mark.parametrize("posenc", ["rope", "fire"])
def test_relative_schemes_see_only_differences_of_coupled_ids(posenc):
    """RoPE / FIRE (inside its L) on coupled ids: a common shift of every id (another start
    offset) leaves the logits unchanged, while another coupling of the same tokens does not."""
    task = task_for(hints=False)
    model = model_for(task, "coupling", posenc).eval()
    b = task.eval_batch("len=4", 4, torch.Generator().manual_seed(0)).inputs
    with torch.no_grad():
        pos = model.sampler.sample(b.shape[1], training=False, batch_size=4, tokens=b)
        ref = model(b)
        torch.testing.assert_close(model(b, positions=pos + 7), ref, rtol=1e-5, atol=1e-5)
        assert (model(b, positions=torch.arange(b.shape[1]).float()) - ref).abs().max() > 1e-4


@pytest.mark.parametrize("name", KINDS)
def test_generate_positions_follow_the_written_tokens(name):
    """generate asks the sampler with the tokens written so far: every call's positions are the
    prefix of the positions of the final sequence, in cached and recomputed decoding alike."""
    task = task_for(hints=True)
    model = model_for(task, name, "learned").eval()
    calls = []
    orig = model.sampler.sample

    def spy(length, **kw):
        out = orig(length, **kw)
        calls.append((kw["tokens"].clone(), out.clone()))
        return out

    model.sampler.sample = spy
    prompts, answers = task.examples("len=3", 3, seed=0)
    for cache in (True, False):
        calls.clear()
        outs = model.generate(prompts, answers[0].numel(), eos_id=EOS, use_cache=cache)
        assert calls
        finals = [torch.cat([p, o]) for p, o in zip(prompts, outs)]
        for toks, pos in calls:
            for row, p in zip(toks, pos):
                full = next(f for f in finals if torch.equal(f[:row.numel()], row))
                want = orig(full.numel(), training=False, batch_size=1, tokens=full[None])[0]
                assert torch.equal(p, want[:row.numel()])
    cached = model.generate(prompts, 12, eos_id=EOS)
    ref = model.generate(prompts, 12, eos_id=EOS, use_cache=False)
    assert [c.tolist() for c in cached] == [r.tolist() for r in ref]


@pytest.mark.parametrize("name,posenc", [("coupling", "learned"), ("coupling", "rope"),
                                         ("abacus", "learned")])
def test_teacher_forced_equals_generated_on_a_trained_model(name, posenc):
    """A small addition model trained briefly (right on some sums, wrong on others; its weights
    are fixed in tests/data, made by tests/trained_weights.py, so which rows are right does not
    depend on this machine): per row, teacher-forced exact match (positions from the target) ==
    greedy decoding (positions from the model's own output)."""
    model, task = trained(f"addition-{name}-{posenc}")
    accs = []
    for k in (1, 2, 3):
        split = f"len={k}"
        per_row = []
        with torch.no_grad():
            for _, batch, pos in eval_stream(model, task, split, 24, 8, 11):
                pred = model(batch.inputs, positions=pos).argmax(-1)
                per_row += ((pred == batch.targets) | ~batch.eval_mask).all(1).tolist()
        got = exact_match_generated(model, task, split, 24, 8, seed=11)
        assert got["correct"] == per_row, split
        tf = evaluate(model, task, [split], n_sequences=24, batch_size=8, seed=11)
        assert got["seq_acc"] == next(r["value"] for r in tf if r["metric"] == "seq_acc")
        accs.append(got["seq_acc"])
    right = sum(accs) * 24
    assert 1 <= right <= 3 * 24 - 1, accs                  # both right and wrong rows


# ---- resolve-time filling and bad input -------------------------------------------------------
def test_resolve_fills_the_token_ids_and_width_from_the_task():
    cfg = lengen.resolve({"task": {"name": "addition", "kwargs": {"max_train_length": 5,
                                                                  "max_eval_length": 12}},
                          "model": {"positions": "coupling", "posenc": "learned"}}).config
    task = build_task("addition", max_train_length=5, max_eval_length=12)
    kw = cfg.model.positions_kwargs
    assert kw["digit_ids"] == list(task.digit_ids) and kw["blank_ids"] == [4]
    assert len(kw["hint_ids"]) == 102 and kw["max_digits"] == 13
    # the stored config rebuilds the same sampler (a run directory's config.json)
    again = lengen.resolve(cfg.to_dict()).config
    assert again.model.positions_kwargs == kw
    short = lengen.resolve({"task": {"name": "addition", "kwargs": {"max_train_length": 5,
                                                                    "max_eval_length": 12}},
                            "model": {"positions": "abacus", "posenc": "learned"},
                            "eval": {"splits": ["len=3", "len=9"]}}).config
    assert short.model.positions_kwargs["max_digits"] == 10


@pytest.mark.parametrize("overrides,match", [
    (["task.name=copy", "model.positions=coupling"], "has no digit structure"),
    (["task.name=addition", "model.positions=abacus", "model.posenc=learned",
      "model.posenc_kwargs.max_positions=50"], "learned positional table has 50 rows"),
    (["task.name=addition", "model.positions=coupling", "model.posenc=learned",
      "model.positions_kwargs.max_position=200", "model.posenc_kwargs.max_positions=150"],
     "learned positional table has 150 rows"),
    (["task.name=addition", "model.positions=coupling",
      "model.positions_kwargs.max_position=50"], "max_position=50 leaves no id"),
    (["task.name=addition", "model.positions=coupling",
      "model.positions_kwargs.max_digits=20"], "max_digits=20 but the task"),
    (["task.name=addition", "model.positions=abacus", "model.positions_kwargs.max_k=-1"],
     "max_k"),
    (["task.name=addition", "model.positions=coupling",
      "model.positions_kwargs.offsets=example"], "offsets"),
    (["task.name=addition", "model.positions=coupling",
      "model.positions_kwargs.digit_ids=[5, 6, -1]"], "token ids"),
])
def test_bad_configs_fail_before_training(overrides, match):
    with pytest.raises(ConfigError, match=match):
        lengen.resolve(None, overrides)


def test_hand_built_model_needs_the_ids():
    with pytest.raises(ValueError, match="digit_ids is not set"):
        lengen.Transformer(lengen.ModelConfig(vocab_size=20, positions="coupling"))
    with pytest.raises(ValueError, match="max_digits is not set"):
        CouplingSampler(digit_ids=[5, 6])
    with pytest.raises(ValueError, match="more than one"):
        AbacusSampler(digit_ids=[5, 6], hint_ids=[6], max_digits=3)
    assert SAMPLERS["coupling"] is CouplingSampler and SAMPLERS["abacus"] is AbacusSampler


def test_training_rows_wider_than_max_position_fail():
    task = task_for()
    s = sampler_for(task, "coupling")                    # max_position = max_digits + 1 = 10
    wide = task_for()
    b = build_task("addition", max_train_length=12, max_eval_length=12, hints=False).eval_batch(
        "len=12", 2, torch.Generator().manual_seed(0)).inputs
    with pytest.raises(ValueError, match="raise it"):
        positions(s, b, training=True)
    assert wide.max_train_length == 4
