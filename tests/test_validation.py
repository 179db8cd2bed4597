"""The validation machinery itself: every config field has a rule, the framework-passed keys are
exactly what the model passes, and registry classes added later are validated with no code of
their own (constructor introspection through **kw, KWARG_RULES, check_config hooks)."""
from __future__ import annotations

import dataclasses

import pytest
import torch

import lengen
from lengen.checks import Float, Int
from lengen.registry import constructor_params
from lengen.config import (EVAL_RULES, EXPERIMENT_RULES, TASK_RULES, TRAIN_RULES, EvalConfig,
                           ExperimentConfig, TaskConfig, TrainConfig)
from lengen.errors import ConfigError
from lengen.model.config import ATTN_IMPLS, MODEL_RULES, ModelConfig
from lengen.registry import describe
from lengen.samplers import SAMPLERS, PositionSampler


@pytest.mark.parametrize("cls,rules", [(ModelConfig, MODEL_RULES), (TaskConfig, TASK_RULES),
                                       (TrainConfig, TRAIN_RULES), (EvalConfig, EVAL_RULES),
                                       (ExperimentConfig, EXPERIMENT_RULES)])
def test_every_field_has_exactly_one_rule_and_defaults_pass(cls, rules):
    assert {f.name for f in dataclasses.fields(cls)} == set(rules)
    lengen.resolve({})                       # all defaults satisfy their own rules


@pytest.mark.parametrize("cls", [ModelConfig, TaskConfig, TrainConfig, EvalConfig,
                                 ExperimentConfig])
def test_every_field_is_declared_once_with_its_rule_and_doc(cls):
    """The rule tables are read from the fields (lengen.checks.option), never a second list."""
    from lengen.checks import docs_of, rules_of

    docs = docs_of(cls)
    assert all(len(doc) > 3 for doc in docs.values()), docs
    assert rules_of(cls) == {f.name: f.metadata["rule"] for f in dataclasses.fields(cls)}
    defaults = lengen.config.defaults(cls)
    for f in dataclasses.fields(cls):
        if not dataclasses.is_dataclass(f.default_factory):
            f.metadata["rule"].check(defaults[f.name], f.name)    # each default passes its rule


def test_a_field_without_a_rule_is_refused():
    from lengen.checks import rules_of

    @dataclasses.dataclass
    class Loose:
        x: int = 3

    with pytest.raises(AssertionError, match="Loose.x has no validation rule"):
        rules_of(Loose)


def test_attn_impls_match_the_attention_module():
    from lengen.attention.base import IMPLS

    assert ATTN_IMPLS == IMPLS


def test_framework_keys_are_what_the_transformer_passes(monkeypatch):
    import lengen.model.block as blocks
    import lengen.model.transformer as tm

    seen = {}
    real_posenc, real_attention = tm.build_posenc, blocks.build_attention

    def posenc(name, **kw):
        seen["posenc"] = set(kw)
        return real_posenc(name, **kw)

    def attention(name, **kw):
        seen.setdefault("attention", set()).update(kw)
        return real_attention(name, **kw)

    monkeypatch.setattr(tm, "build_posenc", posenc)
    monkeypatch.setattr(blocks, "build_attention", attention)       # blocks build attention
    mc = ModelConfig(d_model=16, n_heads=2, n_layers=2)
    tm.Transformer(mc)
    assert seen["posenc"] == set(mc.posenc_args())
    assert seen["attention"] == set(mc.attention_args(0))


def test_constructor_params_follow_kw_up_the_chain_and_stop_at_module():
    from lengen.attention.diff import DifferentialAttention
    from lengen.tasks.chomsky.cs.bucket_sort import BucketSort

    assert set(constructor_params(BucketSort)) == {"n_symbols", "max_train_length",
                                                   "max_eval_length"}
    params = constructor_params(DifferentialAttention)
    assert {"lambda_init", "lambda_std", "norm_eps", "d_model", "n_heads", "impl"} <= set(params)
    assert "args" not in params and "kwargs" not in params


class Stretch(PositionSampler):
    """Stretched positions: ``k * factor + offset`` (a sampler 'added later' for this test)."""

    random_at_eval = False
    KWARG_RULES = {"factor": Float(gt=0), "offset": Int(min=0)}
    checked = []

    def __init__(self, factor: float, *, offset: int = 0):
        if factor > 100:
            raise ValueError("factor above 100 makes no sense here")
        self.factor, self.offset = factor, offset

    @classmethod
    def check_config(cls, cfg):
        cls.checked.append(cfg.model.positions_kwargs)
        if cfg.model.posenc == "learned":
            raise ValueError("stretched positions overflow a learned table; use rope")

    def sample(self, length, *, training, device=None, generator=None, batch_size=None):
        return torch.arange(length, device=device, dtype=torch.float32) * self.factor + self.offset

    def max_position(self, length):
        return (length - 1) * self.factor + self.offset


class CappedStretch(Stretch):
    """A subclass that forwards **kw to its base."""

    def __init__(self, *, cap: bool = True, **kw):
        super().__init__(**kw)
        self.cap = cap


@pytest.fixture
def samplers(monkeypatch):
    monkeypatch.setitem(SAMPLERS, "stretch", Stretch)
    monkeypatch.setitem(SAMPLERS, "capped", CappedStretch)
    Stretch.checked.clear()


def resolve(*overrides):
    return lengen.resolve({"model": {"d_model": 16, "n_heads": 2, "n_layers": 1}},
                          ["task.kwargs.n_pairs=8", *overrides])


@pytest.mark.parametrize("overrides,message", [
    (["model.positions=stretch"], "needs model.positions_kwargs.factor"),
    (["model.positions=stretch", "model.positions_kwargs={factor: 2, ofset: 1}"],
     "unknown key 'ofset'"),
    (["model.positions=stretch", "model.positions_kwargs={factor: 0}"],
     "model.positions_kwargs.factor must be a finite number > 0"),
    (["model.positions=stretch", "model.positions_kwargs={factor: two}"],
     "model.positions_kwargs.factor must be a finite number"),
    (["model.positions=stretch", "model.positions_kwargs={factor: 2, offset: -1}"],
     "model.positions_kwargs.offset must be an integer >= 0"),
    (["model.positions=stretch", "model.positions_kwargs={factor: 200}"],
     "cannot build position sampler 'stretch' (model.positions, model.positions_kwargs="),
    (["model.positions=stretch", "model.positions_kwargs={factor: 2}", "model.posenc=learned"],
     "position sampler 'stretch': stretched positions overflow a learned table"),
    (["model.positions=capped", "model.positions_kwargs={factor: 2, cap: maybe}"],
     "model.positions_kwargs.cap must be true or false"),
    (["model.positions=capped", "model.positions_kwargs={factr: 2}"],
     "Valid keys: cap, factor, offset. Did you mean 'factor'?"),
])
def test_a_class_added_later_is_validated_without_code_of_its_own(samplers, overrides, message):
    with pytest.raises(ConfigError) as info:
        resolve(*overrides)
    assert message in str(info.value)


def test_a_class_added_later_builds_and_its_hook_runs(samplers):
    cfg = resolve("model.positions=capped", "model.positions_kwargs={factor: 0.5, offset: 3}").config
    assert cfg.model.positions_kwargs == {"factor": 0.5, "offset": 3}
    assert Stretch.checked == [{"factor": 0.5, "offset": 3}]
    assert describe(CappedStretch, SAMPLERS) == "A subclass that forwards **kw to its base."


def test_describe_uses_own_docstring_or_a_single_entry_module():
    from lengen import POSENCS, TASKS

    assert describe(SAMPLERS["identity"], SAMPLERS).startswith("Positions 0, 1, ..., T-1")
    assert describe(SAMPLERS["label"], SAMPLERS) != describe(SAMPLERS["randomized"], SAMPLERS)
    assert describe(POSENCS["rope"], POSENCS) == "Rotary position embedding (RoPE; Su et al. 2021)."
    assert describe(TASKS["parity_check"], TASKS) == "Chomsky R: is the number of 1s odd?"

    class Undocumented(PositionSampler):
        pass

    Undocumented.__module__ = "lengen.samplers.digits"   # shares a module with other entries
    assert describe(Undocumented, dict(SAMPLERS, u=Undocumented)) == ""


def test_resolve_coerces_in_place_and_is_idempotent():
    cfg = lengen.resolve({}, ["train.betas=[0.8, 0.9]", "eval.splits=sparse", "train.lr=1e-3"]).config
    assert cfg.train.betas == (0.8, 0.9) and cfg.eval.splits == ["sparse"]
    again = lengen.resolve(cfg.to_dict()).config
    assert again.to_dict() == cfg.to_dict()


def test_d_ff_defaults_to_twice_the_configured_d_model():
    """model.d_ff left out is 2 x the config's own d_model (from a dict, overrides or both), not
    2 x the default d_model; an explicit d_ff is kept, and a resolved config round-trips."""
    import lengen

    assert lengen.resolve({"model": {"d_model": 64}}).config.model.d_ff == 128
    assert lengen.resolve(None, ["model.d_model=32"]).config.model.d_ff == 64
    assert lengen.resolve({"model": {"d_model": 64}}, ["model.d_model=48"]).config.model.d_ff == 96
    assert lengen.resolve({"model": {"d_model": 64, "d_ff": 100}}).config.model.d_ff == 100
    assert lengen.resolve().config.model.d_ff == 2 * lengen.resolve().config.model.d_model
    cfg = lengen.resolve({"model": {"d_model": 64}}).config
    again = lengen.resolve(cfg.to_dict(), ["model.d_model=32"]).config
    assert again.model.d_ff == 128            # stored configs carry their d_ff explicitly
