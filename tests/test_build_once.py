"""Validate once, build once (issue 29 item 2, issue 51 item 3): one ``lengen train`` checks the
model config once and builds the task, the position sampler and each positional-scheme instance
once (``lengen.resolve`` builds them to check the config and returns them with it,
:class:`lengen.config.Resolved`, which the run takes), and one attention layer per block; a seed's
weights do not depend on which of the two built a component."""
from __future__ import annotations

import collections
import functools
import os

import pytest
import torch

import lengen
from lengen.attention import ATTENTIONS
from lengen.errors import ArgumentError, ConfigError
from lengen.posenc import POSENCS
from lengen.rundir.load import prepare
from lengen.samplers import SAMPLERS
from lengen.tasks import TASKS


@pytest.fixture
def built(monkeypatch):
    """Counts ``{class name: constructions}`` of the registered classes (a subclass's
    ``super().__init__`` is not counted again)."""
    counts = collections.Counter()
    for registry in (POSENCS, ATTENTIONS, SAMPLERS, TASKS):
        for cls in registry.values():
            def init(self, *args, _init=cls.__init__, _cls=cls, **kwargs):
                if type(self) is _cls:
                    counts[_cls.__name__] += 1
                _init(self, *args, **kwargs)

            monkeypatch.setattr(cls, "__init__", functools.wraps(cls.__init__)(init))
    return counts


def tiny(n_layers=3, **model):
    return {"task": {"name": "copy", "kwargs": {"max_train_length": 4}},
            "model": {"d_model": 16, "n_layers": n_layers, "n_heads": 2, **model},
            "train": {"steps": 1, "batch_size": 2, "warmup_steps": 0, "progress": False},
            "eval": {"splits": ["len=3"], "sequences": 2}}


@pytest.mark.parametrize("resolved", [True, False], ids=["resolve-then-train", "train-a-dict"])
def test_one_run_builds_each_component_once(built, tmp_path, resolved):
    cfg = tiny(posenc="alibi", positions="randomized", positions_kwargs={"max_length": 32})
    _, _, rows = lengen.train(lengen.resolve(cfg) if resolved else cfg, str(tmp_path / "run"),
                              quiet=True)
    assert rows                                                   # trained and evaluated
    assert built == {"Copy": 1, "ALiBi": 1, "RandomizedSampler": 1, "SoftmaxAttention": 3}


def test_a_per_layer_scheme_is_built_once_per_layer(built, tmp_path):
    cfg = tiny(n_layers=3, posenc="fire", posenc_kwargs={"per_layer": True})
    model, _, _ = lengen.train(cfg, str(tmp_path / "run"), quiet=True)
    assert built["FIRE"] == 3 and len(model.unique_posencs()) == 3
    assert built["Copy"] == 1 and built["IdentitySampler"] == 1


def test_the_run_takes_copies_of_what_validation_built(tmp_path):
    r = lengen.resolve(tiny(posenc="learned"))
    task, model = prepare(r)
    assert task is r.task
    # the model owns copies (same values): two runs prepared from one Resolved share nothing
    assert type(model.posenc) is type(r.scheme) and model.posenc is not r.scheme
    assert type(model.sampler) is type(r.sampler) and model.sampler is not r.sampler
    task2, model2 = prepare(r)
    assert task2 is task and model2.posenc is not model.posenc
    with torch.no_grad():
        model.posenc.table.add_(1.0)
    assert not torch.equal(model.posenc.table, model2.posenc.table)


def test_a_config_changed_after_validation_is_validated_again():
    r = lengen.resolve(tiny(posenc="learned"))
    assert not r.changed()
    r.config.model.posenc_kwargs = {"max_positions": 64}
    assert r.changed()
    _, model = prepare(r)
    assert model.posenc.max_positions == 64
    r.config.model.posenc_kwargs = {"max_positions": 4}          # too short for len=3 (8 tokens)
    with pytest.raises(ConfigError, match="learned positional table has 4 rows"):
        prepare(r)


@pytest.fixture
def checks(monkeypatch):
    """Counts calls of ModelConfig.validate and ModelConfig.registry_parts."""
    from lengen.model.config import ModelConfig

    counts = collections.Counter()
    for name in ("validate", "registry_parts"):
        def counted(self, *a, _real=getattr(ModelConfig, name), _name=name, **k):
            counts[_name] += 1
            return _real(self, *a, **k)

        monkeypatch.setattr(ModelConfig, name, counted)
    return counts


def test_one_lengen_train_validates_once(checks, built, tmp_path, capsys):
    """Issue 51 item 3: one ``lengen train`` checks the model config once (it used to be 6 times
    ModelConfig.validate and 3 times registry_parts before step 1) and builds each component
    once, final evaluation included."""
    from lengen.cli import main

    assert main(["train", "--run-dir", str(tmp_path / "run"), "task.name=copy",
                 "task.kwargs.max_train_length=4", "model.d_model=16", "model.n_layers=2",
                 "model.n_heads=2", "model.posenc=alibi", "train.steps=1", "train.batch_size=2",
                 "train.warmup_steps=0", "train.progress=false", "eval.splits=[len=3]",
                 "eval.sequences=2"]) == 0
    assert checks == {"validate": 1, "registry_parts": 1}
    assert built == {"Copy": 1, "ALiBi": 1, "IdentitySampler": 1, "SoftmaxAttention": 2}


def test_the_python_api_validates_once_too(checks, tmp_path):
    r = lengen.resolve(tiny())
    lengen.train(r, str(tmp_path / "run"), quiet=True)
    assert checks == {"validate": 1, "registry_parts": 1}


def test_a_hand_made_model_config_is_still_checked():
    """A ModelConfig made in Python is checked when made, and again by the model when a field
    was set after that; one resolve() validated is not checked again unless changed."""
    mc = lengen.ModelConfig(d_model=16, n_heads=2, n_layers=1)
    mc.d_model = 15
    with pytest.raises(ConfigError, match="model.d_model=15 must be divisible by model.n_heads"):
        lengen.Transformer(mc)
    mc.d_model = 16
    mc.posenc_kwargs["no_such_key"] = 1                        # inside a dict: seen too
    with pytest.raises(ConfigError, match="unknown key 'no_such_key' in model.posenc_kwargs"):
        lengen.Transformer(mc)
    mc.posenc_kwargs.clear()
    mc.posenc = "no_such_scheme"
    with pytest.raises(ConfigError, match="unknown positional scheme 'no_such_scheme'"):
        lengen.Transformer(mc)
    r = lengen.resolve(tiny())
    r.config.model.dropout = 2.0
    with pytest.raises(ConfigError, match="model.dropout must be"):
        lengen.Transformer(r.config.model)


@pytest.mark.parametrize("posenc,kwargs", [(name, {}) for name in POSENCS] +
                         [("fire", {"per_layer": True}), ("kerple_log", {"per_layer": True})])
def test_a_seeds_weights_do_not_depend_on_who_built_the_scheme(posenc, kwargs):
    cfg = lengen.resolve(tiny(posenc=posenc, posenc_kwargs=kwargs, dropout=0.1)).config
    _, handed = prepare(cfg)                              # scheme and sampler from validation
    after_handed = torch.rand(4)                          # the stream dropout continues from
    torch.manual_seed(cfg.train.seed)
    own = lengen.Transformer(cfg.model)                   # everything built by the model
    assert torch.equal(torch.rand(4), after_handed)
    a, b = handed.state_dict(), own.state_dict()
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def test_an_attention_constructor_complaint_still_stops_the_run_before_any_file(tmp_path):
    run = tmp_path / "run"
    with pytest.raises(ConfigError, match=r"cannot build attention kind 'cope' \(model.attention"
                                          r", model.attention_kwargs=\{'npos': 0\}\).*npos"):
        lengen.train(tiny(attention="cope", attention_kwargs={"npos": 0}), str(run), quiet=True)
    assert not os.path.exists(run)


def test_a_handed_in_component_must_be_of_the_configured_class():
    mc = lengen.ModelConfig(d_model=16, n_heads=2, n_layers=1, posenc="rope")
    with pytest.raises(ArgumentError, match="posenc must be the positional scheme 'rope'"):
        lengen.Transformer(mc, posenc=POSENCS["alibi"](d_model=16, n_heads=2, head_dim=8,
                                                       causal=True))
    with pytest.raises(ArgumentError, match="sampler must be the position sampler 'identity'"):
        lengen.Transformer(mc, sampler=SAMPLERS["randomized"](max_length=8))
