"""Position interpolation per test length (``interpolate``) and head / tail index warping
(``warp``), "Improving Length Generalization via Position Index Warping" eqs. 5, 7, 8.

Every expected value is written here from the equations (float64, then float32 as the samplers
return), not taken from the samplers: ``alpha * j``, ``l * sqrt(j / l)``, the Beta(2, 5) CDF in
closed form ``1 - (1 - x)^6 - 6 x (1 - x)^5``, ``j * M / L``.
"""
from __future__ import annotations

import math

import pytest
import torch

import lengen
from lengen.errors import ConfigError
from lengen.samplers import SAMPLERS, build_sampler
from lengen.samplers.interpolate import InterpolateSampler
from lengen.samplers.warp import PRESETS, WarpSampler

ALPHAS = (0.4, 0.5, 0.6, 0.7, 0.8)


def f32(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64).float()


def beta25(x: float) -> float:
    return 1 - (1 - x) ** 6 - 6 * x * (1 - x) ** 5


def classify(row: torch.Tensor, l: int, skew=math.sqrt, alphas=ALPHAS):
    """-> ('none' | 'head' | 'tail', alpha) by comparing the row with each formula exactly."""
    T = row.shape[0]
    if torch.equal(row, f32([float(j) for j in range(T)])):
        return "none", None
    for a in alphas:
        if torch.equal(row, f32([a * j for j in range(T)])):
            return "head", a
    tail = f32([l * skew(j / l) if j < l else float(j) for j in range(T)])
    if torch.equal(row, tail):
        return "tail", None
    raise AssertionError(f"row matches no formula: {row.tolist()} (l={l})")


# -- interpolate -------------------------------------------------------------------------------------
def test_interpolate_formula_per_row():
    s = InterpolateSampler(train_length=10)
    lengths = torch.tensor([25, 10, 7, 11])
    assert torch.equal(s.sample(25, training=True), torch.arange(25.0))   # identity in training
    pos = s.sample(25, training=False, batch_size=4, lengths=lengths)
    assert pos.shape == (4, 25) and pos.dtype == torch.float32
    for b, L in enumerate(lengths.tolist()):
        want = [j * 10 / L if L > 10 else float(j) for j in range(25)]
        assert torch.equal(pos[b], f32(want)), b
    # the last real position stays below M: the trained range [0, M)
    assert float(pos[0, 24]) < 10 and float(pos[3, 10]) < 10
    # every row identity -> one shared [T] row
    assert torch.equal(s.sample(8, training=False, batch_size=3, lengths=torch.tensor([8, 5, 2])),
                       torch.arange(8.0))
    # no batch: one row of the full length
    assert torch.equal(s.sample(20, training=False), f32([j * 0.5 for j in range(20)]))
    assert s.random_at_eval is False and s.uses_batch and s.per_instance


def test_interpolate_options():
    fixed = InterpolateSampler(factor=4)
    assert torch.equal(fixed.sample(9, training=False, batch_size=2, lengths=torch.tensor([9, 3])),
                       f32([[j / 4 for j in range(9)]] * 2))
    last = InterpolateSampler(train_length=10, ratio="last_index")
    pos = last.sample(31, training=False, batch_size=1, lengths=torch.tensor([31]))
    assert torch.equal(pos[0], f32([j * 9 / 30 for j in range(31)])) and float(pos[0, -1]) == 9.0
    # items: copy rows of K items have 2K + 2 tokens; M = 20 items; ratio M / K
    items = InterpolateSampler(train_length=20, length_unit="items", items_map=(2, 2))
    L = torch.tensor([2 * 40 + 2, 2 * 20 + 2])
    pos = items.sample(82, training=False, batch_size=2, lengths=L)
    assert torch.equal(pos[0], f32([j * 20 / 40 for j in range(82)]))
    assert torch.equal(pos[1], torch.arange(82.0))
    tokens = InterpolateSampler(train_length=42)                   # the same run in tokens
    assert torch.equal(tokens.sample(82, training=False, batch_size=1, lengths=L[:1])[0],
                       f32([j * 42 / 82 for j in range(82)]))


def test_interpolate_max_position_bounds_train_and_eval():
    s = InterpolateSampler(train_length=10)
    assert s.max_position(8) == 7.0
    assert s.max_position(100) == pytest.approx(99 * 10 / 100)     # < M, never the length
    def learned(rows, **kw):
        return lengen.Transformer(lengen.ModelConfig(
            vocab_size=5, d_model=16, n_heads=2, n_layers=1, posenc="learned",
            posenc_kwargs={"max_positions": rows}, positions="interpolate",
            positions_kwargs={"train_length": 10, **kw}))

    # PI with ratio M / L reaches (L - 1) M / L in (M - 1, M): M + 1 rows serve any test length,
    # M rows do not; with ratio (M - 1) / (L - 1) M rows do
    learned(11).check_length(500)
    with pytest.raises(ValueError, match="learned positional table has 10 rows"):
        learned(10).check_length(500)
    learned(10, ratio="last_index").check_length(500)
    assert InterpolateSampler(factor=2).max_position(9) == 8.0


def test_config_fills_M_from_the_task():
    cfg = lengen.resolve({"model": {"positions": "interpolate"},
                          "task": {"name": "copy", "kwargs": {"max_train_length": 7}}}).config
    assert cfg.model.positions_kwargs["train_length"] == 2 * 7 + 2      # prompt + answer
    cfg = lengen.resolve({"model": {"positions": "warp", "positions_kwargs":
                                    {"length_unit": "items"}},
                          "task": {"name": "summation", "kwargs": {"max_train_length": 6}}}).config
    assert cfg.model.positions_kwargs["train_length"] == 6
    assert cfg.model.positions_kwargs["items_map"] == [1, 3]          # K digits + 3 tokens
    cfg = lengen.resolve({"model": {"positions": "interpolate",
                                    "positions_kwargs": {"train_length": 5}},
                          "task": {"name": "copy"}}).config
    assert cfg.model.positions_kwargs["train_length"] == 5             # explicit wins
    cfg = lengen.resolve({"model": {"positions": "interpolate",
                                    "positions_kwargs": {"factor": 3.0}},
                          "task": {"name": "copy"}}).config
    assert "train_length" not in cfg.model.positions_kwargs


def test_interpolation_without_a_training_length_fails_clearly(monkeypatch):
    with pytest.raises(ValueError, match="train_length=M.*factor"):
        InterpolateSampler()
    with pytest.raises(ValueError, match="train_length=M"):
        WarpSampler()
    WarpSampler(eval_mode="identity")                                # no PI, no M needed
    from lengen.tasks.sequence.copy import Copy

    monkeypatch.setattr(Copy, "train_input_length", lambda self: None)
    with pytest.raises(ConfigError, match="model.positions_kwargs.train_length"):
        lengen.resolve({"model": {"positions": "warp"}, "task": {"name": "copy"}})
    with pytest.raises(ConfigError, match="length_unit=tokens"):
        lengen.resolve({"model": {"positions": "interpolate",
                                  "positions_kwargs": {"length_unit": "items"}},
                        "task": {"name": "flipflop"}})


# -- warp: formulas ----------------------------------------------------------------------------------
def draw_rows(sampler, lengths, seed, T=None):
    lengths = torch.tensor(lengths)
    T = int(lengths.max()) if T is None else T
    g = torch.Generator().manual_seed(seed)
    pos = sampler.sample(T, training=True, generator=g, batch_size=len(lengths), lengths=lengths)
    return pos.expand(len(lengths), T) if pos.dim() == 1 else pos


def test_warped_rows_follow_eqs_7_and_8_exactly_with_right_padding():
    s = WarpSampler(train_length=50)
    lengths = [12, 7, 30, 3, 30, 19, 25, 2] * 8
    kinds = {"none": 0, "head": 0, "tail": 0}
    for seed in range(6):
        pos = draw_rows(s, lengths, seed, T=30)
        for row, l in zip(pos, lengths):
            kind, _ = classify(row, l)
            kinds[kind] += 1
    assert all(v > 0 for v in kinds.values()), kinds


def test_beta_and_custom_skews():
    s = WarpSampler(train_length=50, p_head=0.0, p_tail=1.0, skew="beta")
    pos = draw_rows(s, [20, 9], seed=0, T=20)
    for row, l in zip(pos, (20, 9)):
        want = torch.tensor([l * beta25(j / l) if j < l else float(j) for j in range(20)],
                            dtype=torch.float64)
        torch.testing.assert_close(row.double(), want, rtol=1e-6, atol=1e-5)
    pos = draw_rows(WarpSampler(train_length=50, p_tail=1.0, skew="numpy:square"), [10], 0)
    assert torch.equal(pos[0], f32([10 * (j / 10) ** 2 for j in range(10)]))
    cube = WarpSampler(train_length=50, p_tail=1.0, skew=lambda t: t ** (1 / 3))  # Python API
    assert torch.equal(draw_rows(cube, [8], 0)[0], f32([8 * (j / 8) ** (1 / 3) for j in range(8)]))
    beta33 = WarpSampler(train_length=50, p_tail=1.0, skew="beta", beta_a=3, beta_b=3)
    x = 0.3                                   # I_x(3, 3) = 10x^3 - 15x^4 + 6x^5
    assert float(draw_rows(beta33, [10], 0)[0, 3]) == pytest.approx(
        10 * (10 * x ** 3 - 15 * x ** 4 + 6 * x ** 5), rel=1e-6)


@pytest.mark.parametrize("preset", list(PRESETS))
def test_fraction_of_warped_instances_is_binomial(preset):
    p_head, p_tail = PRESETS[preset]
    s = WarpSampler(preset=preset, train_length=50)
    n, head, tail, alpha_counts = 0, 0, 0, {a: 0 for a in ALPHAS}
    lengths = [9, 14, 5, 20] * 64
    for seed in range(40):
        for row, l in zip(draw_rows(s, lengths, seed, T=20), lengths):
            kind, a = classify(row, l)
            n += 1
            head += kind == "head"
            tail += kind == "tail"
            if a is not None:
                alpha_counts[a] += 1
    for p, k in ((p_head, head), (p_tail, tail)):
        sd = math.sqrt(max(p * (1 - p), 1e-12) / n)
        assert abs(k / n - p) < 5 * sd + 1e-12, (preset, p, k / n)
    if p_head:
        # each alpha picked with probability 1/5 among head rows
        for a, c in alpha_counts.items():
            assert abs(c / head - 0.2) < 5 * math.sqrt(0.16 / head), (a, c, head)


def test_fixed_alpha_for_the_language_model_study():
    s = WarpSampler(train_length=512, preset="head_only", alphas=1 / 6)
    seen_head = False
    for seed in range(10):
        for row in draw_rows(s, [16] * 16, seed):
            kind, a = classify(row, 16, alphas=(1 / 6,))
            seen_head |= kind == "head"
    assert seen_head and s.alphas == (1 / 6,)


def test_warp_is_reproducible_from_a_seeded_generator():
    s = WarpSampler(train_length=40)
    a = draw_rows(s, [20, 13, 7, 20] * 4, seed=3)
    b = draw_rows(s, [20, 13, 7, 20] * 4, seed=3)
    c = draw_rows(s, [20, 13, 7, 20] * 4, seed=4)
    assert torch.equal(a, b) and not torch.equal(a, c)
    # the global RNG without a generator: seeded the same, the same draw
    torch.manual_seed(0)
    x = s.sample(20, training=True, batch_size=16)
    torch.manual_seed(0)
    assert torch.equal(x, s.sample(20, training=True, batch_size=16))


def test_warp_eval_is_interpolation_and_deterministic():
    w, p = WarpSampler(train_length=12), InterpolateSampler(train_length=12)
    lengths = torch.tensor([40, 12, 13, 5])
    g = torch.Generator().manual_seed(0)
    state = g.get_state()
    got = w.sample(40, training=False, batch_size=4, lengths=lengths, generator=g)
    assert torch.equal(got, p.sample(40, training=False, batch_size=4, lengths=lengths))
    assert torch.equal(g.get_state(), state)                # no draw at evaluation
    assert torch.equal(WarpSampler(eval_mode="identity").sample(9, training=False, batch_size=2),
                       torch.arange(9.0))


def test_warp_max_position_covers_every_training_draw():
    s = WarpSampler(train_length=30, p_tail=1.0, p_head=0.0)
    top = 0.0
    for seed in range(3):
        top = max(top, float(draw_rows(s, list(range(1, 31)), seed).max()))
    assert top <= s.max_position(30) and s.max_position(30) < 30
    # longer inputs: training never sees them, PI keeps their positions below M
    assert s.max_position(300) == max(s.max_position(30), float(f32(299 * 30 / 300)))
    assert s.max_position(300) < 30


# -- bad input -----------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs,match", [
    ({"p_head": 1.2}, "p_head is a probability"),
    ({"p_tail": -0.1}, "p_tail is a probability"),
    ({"p_head": 0.7, "p_tail": 0.5}, "p_head \\+ p_tail must be <= 1"),
    ({"alphas": [0.5, 1.0]}, "0 < alpha < 1"),
    ({"alphas": 0.0}, "0 < alpha < 1"),
    ({"alphas": []}, "alphas is empty"),
    ({"preset": "both"}, "unknown preset"),
    ({"preset": "head_only", "p_head": 0.2}, "either"),
    ({"skew": lambda t: t + 0.3 * __import__("numpy").sin(2 * math.pi * t)}, "non-decreasing"),
    ({"skew": lambda t: t * 0.5}, "f\\(1\\) = 1"),
    ({"skew": "numpy:cos"}, "f\\(0\\) = 0"),
    ({"skew": "nosuchmodule:f"}, "cannot import"),
    ({"skew": "cube"}, "not a known name"),
    ({"eval_mode": "pi"}, "unknown eval_mode"),
    ({"factor": 0.5}, "factor must be >= 1"),
    ({"factor": 2.0, "train_length": 5}, "not both"),
    ({"train_length": 10.5}, "train_length must be an integer"),
    ({"length_unit": "items", "items_map": [2, 2, 1]}, "items_map must be two integers"),
    ({"length_unit": "items", "items_map": "2,2"}, "items_map must be two integers"),
    ({"length_unit": "pairs"}, "unknown length_unit"),
    ({"ratio": "log"}, "unknown ratio"),
])
def test_bad_warp_kwargs(kwargs, match):
    kwargs = dict(kwargs)
    if "factor" not in kwargs and "train_length" not in kwargs:
        kwargs["train_length"] = 10
    with pytest.raises(ValueError, match=match):
        WarpSampler(**kwargs)


@pytest.mark.parametrize("override,needle", [
    ("model.positions_kwargs.p_head=1.5", "model.positions_kwargs.p_head"),
    ("model.positions_kwargs={p_head: 0.8, p_tail: 0.4}", "p_head + p_tail must be <= 1"),
    ("model.positions_kwargs.alphas=[0.5, 1.5]", "0 < alpha < 1"),
    ("model.positions_kwargs.skew=numpy:cos", "f(0) = 0"),
    ("model.positions_kwargs.preset=tail", "unknown preset"),
])
def test_bad_warp_config_fails_before_training(override, needle):
    with pytest.raises(ConfigError) as e:
        lengen.resolve(None, ["model.positions=warp", "task.name=copy", override])
    assert needle in str(e.value)


# -- plumbing: training, evaluation, generation ------------------------------------------------------
def test_train_eval_generate_hand_the_rows_to_the_sampler(tmp_path, monkeypatch):
    calls = []
    original = WarpSampler.sample

    def spy(self, length, *, training, lengths=None, **kw):
        calls.append((training, None if lengths is None else lengths.tolist(), length))
        return original(self, length, training=training, lengths=lengths, **kw)

    monkeypatch.setattr(WarpSampler, "sample", spy)
    cfg = lengen.resolve({
        "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "posenc": "rope",
                  "positions": "warp"},
        "task": {"name": "copy", "kwargs": {"max_train_length": 4, "max_eval_length": 8}},
        "train": {"steps": 2, "batch_size": 8, "progress": False, "ckpt_every": 0,
                  "warmup_steps": 0},
        "eval": {"splits": ["len=3", "len=8"], "sequences": 4, "batch_size": 4}}).config
    assert cfg.model.positions_kwargs["train_length"] == 10
    model, task, rows = lengen.train(cfg, str(tmp_path / "run"))
    train_calls = [c for c in calls if c[0]]
    assert len(train_calls) == 2 and all(len(c[1]) == 8 for c in train_calls)
    assert all(max(c[1]) <= 10 for c in train_calls)
    evals = [c for c in calls if not c[0]]
    assert [c[1] for c in evals] == [[8] * 4, [18] * 4]          # per-row lengths, eval mode
    from lengen.eval.evaluate import eval_stream

    model.eval()
    (_, batch, pos), = list(eval_stream(model, task, "len=8", 4, 4, seed=0))
    assert torch.equal(pos, f32([[j * 10 / 18 for j in range(18)]] * 4))
    calls.clear()
    model.generate([torch.tensor([3, 4, 5, 2])], max_new_tokens=3)
    assert calls == [(False, [7], 7)]
    from lengen.eval.generation import exact_match_generated

    got = exact_match_generated(model, task, "len=8", 4, 4, seed=0)
    with torch.no_grad():
        pred = model(batch.inputs, positions=pos).argmax(-1)
    assert got["correct"] == ((pred == batch.targets) | ~batch.eval_mask).all(1).tolist()


@pytest.mark.parametrize("posenc,kw", [("rope", {}), ("alibi", {}),
                                       ("learned", {"max_positions": 40})])
def test_composes_with_schemes_row_by_row(posenc, kw):
    """[B, T] warped (fractional) positions give each row the output it gets alone with its own
    [T] positions, for rotary, bias and absolute schemes."""
    torch.manual_seed(0)
    model = lengen.Transformer(lengen.ModelConfig(
        vocab_size=11, d_model=16, n_heads=2, n_layers=2, posenc=posenc, posenc_kwargs=kw,
        positions="warp", positions_kwargs={"train_length": 20, "p_head": 0.5,
                                            "p_tail": 0.5}))
    x = torch.randint(0, 11, (6, 20))
    lengths = torch.tensor([20, 15, 9, 20, 4, 12])
    pos = model.sample_positions(20, batch_size=6, lengths=lengths,
                                 generator=torch.Generator().manual_seed(1))
    assert pos.shape == (6, 20) and not torch.equal(pos, pos.round())    # fractional
    model.eval()
    with torch.no_grad():
        out = model(x, positions=pos)
        for b in range(6):
            torch.testing.assert_close(out[b], model(x[b:b + 1], positions=pos[b])[0],
                                       rtol=1e-5, atol=1e-5)
        ev = model.sample_positions(40, batch_size=2, lengths=torch.tensor([40, 20]))
        y = model(torch.randint(0, 11, (2, 40)), positions=ev)
    assert torch.isfinite(y).all() and float(ev[0, -1]) < 20


def test_registered_and_described():
    assert SAMPLERS["interpolate"] is InterpolateSampler and SAMPLERS["warp"] is WarpSampler
    d = build_sampler("warp", train_length=42, preset="tail_only", skew="beta").describe()
    assert "30% tail" in d and "Beta(2, 5)" in d and "M = 42" in d
    assert "j / 4" in build_sampler("interpolate", factor=4).describe()
