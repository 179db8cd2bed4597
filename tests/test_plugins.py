"""Plugins: a class outside lengen named by import path (``package.module:Name``) or by an entry
point of an installed package, wherever a registry name is taken (model.posenc,
model.attention, model.positions, task.name); the resolved config stores the import path, so
spawned sweep workers rebuild the same class; clear errors for every way a plugin can be wrong.

The plugin package is written into a temporary folder put on ``sys.path``; its entry points come
from a ``*.dist-info`` folder beside it, which ``importlib.metadata`` reads like an installed
package's."""
from __future__ import annotations

import json
import os
import textwrap

import pytest

import lengen
from lengen.attention import ATTENTION_POINT
from lengen.cli import main
from lengen.errors import ConfigError, LengenWarning
from lengen.posenc import POSENC_POINT, build_posenc
from lengen.tasks import TASK_POINT

PE = '''
"""Learned per-head linear distance slopes: bias -softplus(s_h) * |i - j| (a test plugin)."""
import torch
from torch import nn
from lengen.posenc.base import PositionalScheme


class LinearSlopes(PositionalScheme):
    """Learned per-head linear distance slopes (an ALiBi whose slopes are trained)."""
    has_bias = True

    def __init__(self, *, init_slope: float = 0.5, **kw):
        super().__init__(**kw)
        self.s = nn.Parameter(torch.full((self.n_heads,), float(init_slope)))

    def bias(self, pos_q, pos_k, q=None, k=None):
        dist = self.pairwise(pos_q, pos_k, self.s.dtype).abs()       # [(B,) Tq, Tk]
        return -nn.functional.softplus(self.s)[:, None, None] * dist.unsqueeze(-3)


class NotAScheme:
    pass
'''

MIXERS = '''
from torch import nn

from lengen.attention.mixer import TokenMixer


class Mixer(TokenMixer):
    """A token mixer that is no Attention subclass (a test plugin)."""


class NotAMixer(nn.Module):
    """Declares the flag but subclasses neither base: it lacks the supports_* flags."""
    is_token_mixer = True
'''

TASKS = '''
from lengen.tasks.sequence.copy import Copy


class ShortCopy(Copy):
    """Copy with a shorter default training length (a test plugin)."""
'''


def _dist_info(root, name, entries: dict[str, dict[str, str]]):
    d = root / f"{name}-0.1.dist-info"
    d.mkdir()
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (d / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in names.items())
        for group, names in entries.items()))


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    root = tmp_path / "site"
    pkg = root / "myplug"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "pe.py").write_text(textwrap.dedent(PE))
    (pkg / "tasks.py").write_text(textwrap.dedent(TASKS))
    (pkg / "mix.py").write_text(textwrap.dedent(MIXERS))
    (pkg / "broken.py").write_text("raise RuntimeError('plugin says no')\n")
    _dist_info(root, "myplug", {"lengen.posencs": {"slopes": "myplug.pe:LinearSlopes"},
                                "lengen.tasks": {"short_copy": "myplug.tasks:ShortCopy"}})
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    _forget_myplug()                     # each test has its own folder: import it afresh
    yield root
    _forget_myplug()


def _forget_myplug():
    import importlib
    import sys

    for name in [m for m in sys.modules if m == "myplug" or m.startswith("myplug.")]:
        del sys.modules[name]
    importlib.invalidate_caches()


def tiny(**model):
    return {"model": {"d_model": 16, "n_layers": 1, "n_heads": 2, **model},
            "task": {"name": "copy", "kwargs": {"max_train_length": 5}},
            "train": {"steps": 2, "batch_size": 4, "warmup_steps": 0, "progress": False,
                      "threads": 1},
            "eval": {"sequences": 4, "batch_size": 4, "splits": ["len=3"]}}


def test_import_path_trains_resumes_and_evaluates(plugin, tmp_path):
    cfg = lengen.resolve(tiny(posenc="myplug.pe:LinearSlopes",
                              posenc_kwargs={"init_slope": 0.25})).config
    assert cfg.model.posenc == "myplug.pe:LinearSlopes"
    model, _, rows = lengen.train(cfg, str(tmp_path / "run"), quiet=True)
    assert type(model.posenc).__name__ == "LinearSlopes" and rows
    saved = json.load(open(tmp_path / "run" / "config.json"))
    assert saved["model"]["posenc"] == "myplug.pe:LinearSlopes"
    # a second train() on the finished run reads it back (same config, nothing retrained)
    _, _, again = lengen.train(cfg, str(tmp_path / "run"), quiet=True)
    assert [r["value"] for r in again] == [r["value"] for r in rows]
    assert main(["eval", str(tmp_path / "run"), "--splits", "len=4", "--sequences", "4"]) == 0


def test_entry_point_name_is_stored_as_its_import_path(plugin):
    cfg = lengen.resolve(tiny(posenc="slopes")).config
    assert cfg.model.posenc == "myplug.pe:LinearSlopes"
    cfg = lengen.resolve({**tiny(), "task": {"name": "short_copy"}}).config
    assert cfg.task.name == "myplug.tasks:ShortCopy"
    assert type(build_posenc("slopes", d_model=8, n_heads=2, head_dim=4)).__name__ == "LinearSlopes"


def test_plugin_kwargs_are_checked_against_its_constructor(plugin):
    with pytest.raises(ConfigError, match=r"unknown key 'init_slop' in model.posenc_kwargs .*"
                                          r"Valid keys: init_slope.*Did you mean 'init_slope'"):
        lengen.resolve(tiny(posenc="myplug.pe:LinearSlopes", posenc_kwargs={"init_slop": 1.0}))
    with pytest.raises(ConfigError, match="model.posenc_kwargs.init_slope"):
        lengen.resolve(tiny(posenc="slopes", posenc_kwargs={"init_slope": "steep"}))


def test_list_shows_installed_plugins_with_their_docstring(plugin, capsys):
    assert main(["list"]) == 0
    out = " ".join(capsys.readouterr().out.split())       # lines are wrapped at words
    assert "[plugin myplug.pe:LinearSlopes] Learned per-head linear distance slopes" in out
    assert "short_copy" in out and "import path package.module:Name" in out


@pytest.mark.parametrize("name,needles", [
    ("myplug.broken:X", ["module 'myplug.broken' could not be imported",
                         "RuntimeError: plugin says no"]),
    ("nosuchpkg.pe:X", ["could not be imported", "No module named 'nosuchpkg'"]),
    ("myplug.pe:LinearSlope", ["has no 'LinearSlope'", "LinearSlopes, NotAScheme",
                               "Did you mean 'LinearSlopes'"]),
    ("myplug.pe:NotAScheme", ["is the class myplug.pe:NotAScheme",
                              "must subclass lengen.posenc.base:PositionalScheme"]),
    ("myplug.pe:torch", ["is a module, not a class"]),
    ("myplug.pe:", ["an import path is package.module:Name"]),
    ("slope", ["unknown positional scheme 'slope'", "slopes", "Did you mean 'slopes'"]),
])
def test_bad_plugin_names(plugin, name, needles, capsys):
    with pytest.raises(ConfigError) as e:
        lengen.resolve(tiny(posenc=name))
    for n in needles:
        assert n in str(e.value), str(e.value)
    # the CLI says the same in one paragraph, exit status 2
    assert main(["train", "--run-dir", str(plugin / "r"), f"model.posenc={name}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lengen: error:") and "model.posenc" in err and "Traceback" not in err


def test_a_task_plugin_must_be_a_task(plugin):
    with pytest.raises(ConfigError, match="a task must subclass lengen.tasks.base:Task"):
        TASK_POINT.get("myplug.pe:LinearSlopes")


def test_an_attention_plugin_is_an_attention_or_a_token_mixer(plugin):
    """model.attention takes an Attention or a TokenMixer subclass, nothing else (a module that
    only sets is_token_mixer lacks the supports_* flags the block reads)."""
    assert ATTENTION_POINT.get("myplug.mix:Mixer").__name__ == "Mixer"
    with pytest.raises(ConfigError, match=r"must subclass lengen.attention.base:Attention or "
                                          r"lengen.attention.mixer:TokenMixer\."):
        ATTENTION_POINT.get("myplug.mix:NotAMixer")


def test_two_plugins_claiming_one_name(plugin):
    """Both are skipped under the short name (one warning, naming both); each is still reached
    by its import path, and the other plugins and built-ins are untouched."""
    _dist_info(plugin, "otherplug", {"lengen.posencs": {"slopes": "otherplug.pe:Slopes"}})
    with pytest.warns(LengenWarning, match=r"2 installed plugins register the positional scheme "
                                           r"name 'slopes'.*myplug\.pe:LinearSlopes.*otherplug"):
        assert "slopes" not in POSENC_POINT.plugins()
    with pytest.raises(ConfigError, match=r"model.posenc='slopes': 2 installed plugins.*import "
                                          r"path \(model.posenc=myplug\.pe:LinearSlopes\)"):
        POSENC_POINT.get("slopes")
    assert POSENC_POINT.get("myplug.pe:LinearSlopes").__name__ == "LinearSlopes"
    assert TASK_POINT.get("short_copy").__name__ == "ShortCopy"
    assert POSENC_POINT.get("rope").__name__ == "RoPE"      # built-ins never scan the plugins


def test_a_plugin_may_not_take_a_builtin_name(plugin):
    _dist_info(plugin, "rudeplug", {"lengen.posencs": {"rope": "myplug.pe:LinearSlopes"}})
    with pytest.warns(LengenWarning, match="registers the positional scheme name 'rope'.*"
                                           "built-in.*stays the built-in"):
        assert "rope" not in POSENC_POINT.plugins()
    assert POSENC_POINT.get("rope").__name__ == "RoPE"


def test_spawned_sweep_workers_rebuild_the_plugin(plugin, tmp_path):
    """Two spawned worker processes import the plugin from the stored import path (no
    registration in the parent process is needed or consulted)."""
    from lengen.sweep import RunSpec, run_sweep

    specs = [RunSpec(name=f"s{seed}", config={**tiny(posenc="slopes"),
                                              "train": {**tiny()["train"], "seed": seed}})
             for seed in (0, 1)]
    res = run_sweep(specs, str(tmp_path / "sweep"), workers=2, threads=1, quiet=True,
                    log=lambda *a: None)
    assert res.ok, res.failures
    assert {r["run"] for r in res.rows} == {"s0", "s1"}
    pids = {st["pid"] for st in res.status.values()}
    assert os.getpid() not in pids                      # trained in the spawned workers
    for s in ("s0", "s1"):
        cfg = json.load(open(tmp_path / "sweep" / s / "config.json"))
        assert cfg["model"]["posenc"] == "myplug.pe:LinearSlopes"


def test_lengen_check_fails_a_broken_plugin(plugin, capsys):
    """A scheme that hard-codes a float32 bias passes an import but not the dtype contract."""
    (plugin / "myplug" / "fp32.py").write_text(textwrap.dedent('''
        import torch
        from myplug.pe import LinearSlopes


        class Fp32Slopes(LinearSlopes):
            def bias(self, pos_q, pos_k, q=None, k=None):
                return super().bias(pos_q.float(), pos_k.float()).float()
        '''))
    assert main(["check", "myplug.fp32:Fp32Slopes", "--format", "csv"]) == 1
    out = capsys.readouterr()
    assert "dtype,attention=softmax,fail" in out.out.replace(" ", "")
    assert "returns torch.float32 in a float64 model" in out.out
