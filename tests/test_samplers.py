"""Position samplers: randomized (Ruoss et al.) and label (Li & McClelland) positions.

Range, order, distinctness, uniformity, one draw per batch, seeding (explicit generator and
torch's global RNG), eval behaviour, and length checks through ``Transformer.check_length``.
"""
from __future__ import annotations

import pytest
import torch

from lengen.model.config import ModelConfig
from lengen.model.transformer import Transformer
from lengen.samplers import SAMPLERS, LabelSampler, RandomizedSampler, build_sampler

KINDS = ["randomized", "label"]


def draw(name, T, seed=None, training=True, **kw):
    gen = None if seed is None else torch.Generator().manual_seed(seed)
    return build_sampler(name, **kw).sample(T, training=training, generator=gen)


@pytest.mark.parametrize("name", KINDS)
@pytest.mark.parametrize("T,L", [(1, 5), (7, 7), (40, 2048), (500, 2048)])
def test_range_sorted_distinct_integers(name, T, L):
    for seed in range(5):
        p = draw(name, T, seed, max_length=L)
        assert p.shape == (T,) and p.dtype == torch.float32
        assert p.min() >= 0 and p.max() <= L - 1
        assert torch.equal(p, p.round())
        assert (p[1:] > p[:-1]).all()                     # sorted and no duplicates
    if T == L:                                            # the only subset: every position
        assert torch.equal(p, torch.arange(L, dtype=torch.float32))


@pytest.mark.parametrize("name", KINDS)
def test_draw_is_uniform_over_the_range(name):
    # 3 of 10 positions, 3000 draws: each position is picked with probability 0.3 (900 expected,
    # sd ~25), both ends included
    g = torch.Generator().manual_seed(0)
    s = build_sampler(name, max_length=10)
    counts = torch.zeros(10)
    for _ in range(3000):
        counts[s.sample(3, training=True, generator=g).long()] += 1
    assert counts.sum() == 9000
    assert ((counts - 900).abs() < 120).all(), counts


@pytest.mark.parametrize("name", KINDS)
def test_deterministic_per_seed(name):
    assert torch.equal(draw(name, 50, seed=3), draw(name, 50, seed=3))
    assert not torch.equal(draw(name, 50, seed=3), draw(name, 50, seed=4))
    # without a generator: torch's global RNG, so restoring its state (training resume) repeats it
    torch.manual_seed(11)
    a = draw(name, 50)
    state = torch.get_rng_state()
    b = draw(name, 50)
    torch.set_rng_state(state)
    assert torch.equal(draw(name, 50), b) and not torch.equal(a, b)
    torch.manual_seed(11)
    assert torch.equal(draw(name, 50), a)


@pytest.mark.parametrize("name", KINDS)
def test_one_draw_per_batch(name):
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=8, d_model=16, n_heads=2, n_layers=1, posenc="learned",
                                    positions=name, posenc_kwargs={"max_positions": 2048}))
    calls = []
    orig = model.sampler.sample
    model.sampler.sample = lambda *a, **kw: calls.append(orig(*a, **kw)) or calls[-1]
    x = torch.randint(0, 8, (4, 12))
    model(x)
    assert len(calls) == 1 and calls[0].shape == (12,)    # one [T] draw shared by the 4 sequences
    # the batch shares it: identical sequences in the batch get identical outputs
    x[1:] = x[0]
    y = model(x)
    torch.testing.assert_close(y[1:], y[:1].expand(3, -1, -1))
    # ... and successive batches get fresh draws
    model(x)
    assert not torch.equal(calls[1], calls[2])


def test_eval_modes():
    g = torch.Generator().manual_seed(0)
    r = RandomizedSampler(100)
    assert not torch.equal(r.sample(20, training=False, generator=g), r.sample(20, training=False, generator=g))
    ident = RandomizedSampler(100, eval_mode="identity")
    assert torch.equal(ident.sample(20, training=False), torch.arange(20.0))
    assert torch.equal(ident.sample(150, training=False), torch.arange(150.0))   # may exceed L at eval
    train = ident.sample(20, training=True, generator=torch.Generator().manual_seed(1))
    assert not torch.equal(train, torch.arange(20.0))

    spread = LabelSampler(100, eval_mode="spread")
    p = spread.sample(7, training=False)
    assert torch.equal(p, torch.tensor([0.0, 17, 33, 50, 66, 83, 99]))
    assert torch.equal(spread.sample(7, training=False), p)                      # deterministic
    for T in (1, 2, 51, 99, 100):
        q = spread.sample(T, training=False)
        assert q.shape == (T,) and q.min() >= 0 and q.max() <= 99 and (q[1:] > q[:-1]).all()
    assert not torch.equal(spread.sample(7, training=True, generator=g), p)       # train still draws
    with pytest.raises(ValueError, match="eval_mode"):
        RandomizedSampler(eval_mode="spread")
    with pytest.raises(ValueError, match="eval_mode"):
        LabelSampler(eval_mode="bogus")


@pytest.mark.parametrize("name", KINDS)
def test_too_long_input_is_an_error(name):
    s = build_sampler(name, max_length=16)
    assert s.max_position(16) == 15.0
    with pytest.raises(ValueError, match="max_length"):
        s.sample(17, training=True)
    with pytest.raises(ValueError, match="max_length"):
        s.sample(17, training=False)
    with pytest.raises(ValueError, match="max_length"):
        s.max_position(17)


def test_max_position_reflects_L():
    assert RandomizedSampler().max_length == 2048
    assert RandomizedSampler().max_position(10) == 2047.0
    assert LabelSampler(300).max_position(1) == 299.0
    assert RandomizedSampler(300, eval_mode="identity").max_position(500) == 499.0


@pytest.mark.parametrize("name", KINDS)
def test_learned_table_too_small_rejected_before_training(name):
    def model(max_positions, L):
        return Transformer(ModelConfig(vocab_size=8, d_model=16, n_heads=2, n_layers=1,
                                       posenc="learned", positions=name,
                                       posenc_kwargs={"max_positions": max_positions},
                                       positions_kwargs={"max_length": L}))
    with pytest.raises(ValueError, match="learned positional table"):
        model(1024, 2048).check_length(10)          # 10 tokens, but positions reach 2047
    model(2048, 2048).check_length(10)              # fits
    with pytest.raises(ValueError, match="max_length"):
        model(2048, 2048).check_length(3000)        # more tokens than positions


def test_registry_and_describe():
    assert SAMPLERS["randomized"] is RandomizedSampler and SAMPLERS["label"] is LabelSampler
    for name, kw in [("randomized", {}), ("randomized", {"eval_mode": "identity"}),
                     ("label", {}), ("label", {"eval_mode": "spread"})]:
        d = build_sampler(name, max_length=512, **kw).describe()
        assert d.startswith(name) and "train" in d and "eval" in d and "512" in d
    assert "0..T-1" in build_sampler("randomized", eval_mode="identity").describe()
    assert "evenly spaced" in build_sampler("label", eval_mode="spread").describe()


def test_unsorted_option_draws_the_same_subset_in_random_order():
    # Ruoss et al. Table 3 ablation: sort=False keeps the draw's random order; sort=True (default)
    # must stay the very same draw, sorted (so existing runs are unchanged)
    for seed in range(3):
        s = RandomizedSampler(2048).sample(50, training=True,
                                           generator=torch.Generator().manual_seed(seed))
        u = RandomizedSampler(2048, sort=False).sample(50, training=True,
                                                      generator=torch.Generator().manual_seed(seed))
        assert torch.equal(u.sort().values, s)
        assert not (u[1:] > u[:-1]).all()          # 1/50! chance of a sorted draw
        assert u.unique().numel() == 50 and u.min() >= 0 and u.max() <= 2047
    ev = RandomizedSampler(2048, sort=False).sample(50, training=False)
    assert not (ev[1:] > ev[:-1]).all()            # eval draws are unsorted too
    assert "unsorted" in RandomizedSampler(sort=False).describe()
    assert "unsorted" not in RandomizedSampler().describe()


@pytest.mark.parametrize("name", ["identity"] + KINDS)
def test_batch_size_keeps_one_shared_draw(name):
    """The registered samplers are not per-instance: with batch_size they still return one [T]
    draw, the same one (same RNG use) as without it."""
    s = build_sampler(name)
    assert not s.per_instance
    for training in (True, False):
        a = s.sample(20, training=training, generator=torch.Generator().manual_seed(0))
        b = s.sample(20, training=training, generator=torch.Generator().manual_seed(0),
                     batch_size=4)
        assert b.shape == (20,) and torch.equal(a, b)


class RowShiftSampler:
    """A per-instance sampler for the test: row b is 0..T-1 shifted by 3b."""
    per_instance = True

    def sample(self, length, *, training, device=None, generator=None, batch_size=None):
        base = torch.arange(length, dtype=torch.float32, device=device)
        if batch_size is None:
            return base
        return base + 3.0 * torch.arange(batch_size, dtype=torch.float32, device=device)[:, None]

    def max_position(self, length):
        return float(length - 1 + 3 * 64)


def test_per_instance_sampler_rows_reach_the_model():
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=8, d_model=16, n_heads=2, n_layers=1,
                                    posenc="sincos")).eval()   # absolute: a shift shows
    model.sampler = RowShiftSampler()
    assert model.sample_positions(5, batch_size=3).shape == (3, 5)
    x = torch.randint(0, 8, (3, 12))
    with torch.no_grad():
        want = model(x, model.sampler.sample(12, training=False, batch_size=3))
        torch.testing.assert_close(model(x), want, rtol=0, atol=0)
        # rows really got different positions: row 1 alone at 0..T-1 differs
        assert (model(x[1:2], torch.arange(12.0))[0] - want[1]).abs().max() > 1e-4


def test_batch_lengths_and_batch_aware_sampler_plumbing():
    """Batch.lengths() is the unpadded length of each row; a batch-aware sampler receives the
    rows' lengths and tokens in training, evaluation and generation, the others never do."""
    import lengen
    from lengen.eval.evaluate import eval_stream
    from lengen.samplers import PositionSampler
    from lengen.tasks import build_task

    task = build_task("copy", max_train_length=6)
    b = task.train_batch(16, torch.Generator().manual_seed(0))
    lens = b.lengths()
    for r in range(16):
        real = int((b.inputs[r] > 1).sum())     # not <pad> 0, not the <eos> 1 a padded row reads
        assert int(lens[r]) == real
    seen = []

    class LengthPositions(PositionSampler):
        uses_batch, per_instance, random_at_eval = True, True, False

        def sample(self, length, *, training, device=None, generator=None, batch_size=None,
                   lengths=None, tokens=None):
            seen.append((training, None if lengths is None else lengths.tolist(),
                         None if tokens is None else tuple(tokens.shape)))
            lengths = torch.full((batch_size,), length) if lengths is None else lengths
            return torch.arange(length).float()[None, :] / lengths[:, None].float()

        def max_position(self, length):
            return 1.0

    model = lengen.Transformer(lengen.ModelConfig(vocab_size=task.vocab_size, d_model=16,
                                                  n_layers=1, n_heads=2, posenc="rope"))
    model.sampler = LengthPositions()
    model.eval()
    pieces = list(eval_stream(model, task, "len=3", 5, 2, seed=0))
    assert [p[2].shape for p in pieces] == [(2, 8), (2, 8), (1, 8)]
    assert seen[0] == (False, [8, 8], (2, 8))                  # prompt 5 + answer 3
    seen.clear()
    model.generate([torch.tensor([3, 4, 5, 2])], max_new_tokens=3)
    assert seen == [(False, [7], None)]


# ---- train_draw='row': one draw per row, sized to the row (issue 27) ---------------------------
@pytest.mark.parametrize("name", KINDS)
@pytest.mark.parametrize("sort,zero_first", [(True, False), (False, False), (True, True)])
def test_row_draws_are_each_rows_own_subset(name, sort, zero_first):
    s = build_sampler(name, max_length=40, train_draw="row", sort=sort, zero_first=zero_first)
    assert s.per_instance and s.uses_lengths_in_training and not s.uses_batch
    lengths = torch.tensor([1, 5, 12, 12, 30])
    for seed in range(5):
        p = s.sample(30, training=True, generator=torch.Generator().manual_seed(seed),
                     batch_size=5, lengths=lengths)
        assert p.shape == (5, 30) and p.dtype == torch.float32
        for row, n in zip(p, lengths.tolist()):
            real = row[:n]
            assert real.unique().numel() == n and real.min() >= 0 and real.max() <= 39
            assert torch.equal(real, real.round())
            assert (row[n:] == real[-1]).all()                 # padding repeats the last one
            if sort:
                assert (real[1:] > real[:-1]).all()
            if zero_first:
                assert real[0] == 0
    # same seed, same draw; rows draw independently
    a = s.sample(30, training=True, generator=torch.Generator().manual_seed(0), batch_size=5,
                 lengths=lengths)
    b = s.sample(30, training=True, generator=torch.Generator().manual_seed(0), batch_size=5,
                 lengths=lengths)
    assert torch.equal(a, b) and not torch.equal(a[2], a[3])


def test_row_draw_gives_a_short_row_the_spread_it_gets_at_evaluation():
    """A row of 3 real tokens in a batch padded to 8: with one draw per row each of the 10
    positions is picked with probability 0.3, as in an evaluation draw of 3 (900 of 3000, sd
    ~25); with the default one draw of 8 per batch the row takes its 3 smallest, so the top
    positions are (almost) never its own (P(position 9 among the 3 smallest of 8) = 0)."""
    L, n, T, draws = 10, 3, 8, 3000
    g = torch.Generator().manual_seed(0)
    counts = {mode: torch.zeros(L) for mode in ("row", "batch", "eval")}
    row, batch = (build_sampler("randomized", max_length=L, train_draw=m)
                  for m in ("row", "batch"))
    lengths = torch.tensor([n, T])
    for _ in range(draws):
        p = row.sample(T, training=True, generator=g, batch_size=2, lengths=lengths)
        counts["row"][p[0, :n].long()] += 1
        p = batch.sample(T, training=True, generator=g, batch_size=2, lengths=lengths)
        counts["batch"][p[:n].long()] += 1
        counts["eval"][row.sample(n, training=False, generator=g).long()] += 1
    for mode in ("row", "eval"):
        assert ((counts[mode] - 900).abs() < 120).all(), (mode, counts[mode])
    assert counts["batch"][L - 3:].sum() == 0 and counts["batch"][0] > 2000


def test_row_draw_reads_lengths_in_training_only():
    """The model hands a row-drawing sampler the rows' lengths in train mode ([B, T]); in eval
    mode it is an ordinary random sampler: one [T] draw per block, as with the default."""
    import lengen
    from lengen.eval.evaluate import eval_stream
    from lengen.samplers import RandomizedSampler
    from lengen.tasks import build_task

    task = build_task("copy", max_train_length=6)
    model = lengen.Transformer(lengen.ModelConfig(
        vocab_size=task.vocab_size, d_model=16, n_layers=1, n_heads=2, posenc="rope",
        positions="randomized", positions_kwargs={"max_length": 64, "train_draw": "row"}))
    assert isinstance(model.sampler, RandomizedSampler)
    b = task.train_batch(16, torch.Generator().manual_seed(0))
    T = b.inputs.shape[1]
    model.train()
    p = model.sample_positions(T, batch_size=16, batch=b,
                               generator=torch.Generator().manual_seed(1))
    lens = b.lengths()
    assert p.shape == (16, T) and bool((lens < T).any())
    for row, n in zip(p, lens.tolist()):
        assert (row[:n][1:] > row[:n][:-1]).all() and (row[n:] == row[n - 1]).all()
    model(b.inputs, positions=p).sum().backward()              # [B, T] positions train
    model.eval()
    default = lengen.Transformer(lengen.ModelConfig(
        vocab_size=task.vocab_size, d_model=16, n_layers=1, n_heads=2, posenc="rope",
        positions="randomized", positions_kwargs={"max_length": 64})).eval()
    got = [x[2] for x in eval_stream(model, task, "len=3", 5, 2, seed=0)]
    want = [x[2] for x in eval_stream(default, task, "len=3", 5, 2, seed=0)]
    assert all(g.shape == (8,) and torch.equal(g, w) for g, w in zip(got, want))


def test_row_draw_bad_value_and_describe():
    with pytest.raises(ValueError, match="train_draw"):
        build_sampler("randomized", train_draw="sequence")
    assert "one draw per row" in build_sampler("randomized", train_draw="row").describe()
    assert "one per batch" in build_sampler("randomized").describe()
