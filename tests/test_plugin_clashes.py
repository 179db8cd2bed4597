"""Installed plugins whose entry-point name collides: with a built-in's name, or with another
plugin's. Either way the short name is skipped with one LengenWarning (naming both sides and the
import path that still reaches the plugin); ``lengen list``, the built-ins and every other plugin
keep working. The entry points are fakes (``lengen.registry.entry_points`` monkeypatched), one
test per extension point."""
from __future__ import annotations

import warnings
from importlib.metadata import EntryPoint

import pytest

from lengen import registry
from lengen.attention import ATTENTION_POINT
from lengen.cli import main
from lengen.errors import ConfigError, LengenWarning
from lengen.posenc import POSENC_POINT
from lengen.samplers import SAMPLER_POINT
from lengen.tasks import TASK_POINT

#: point -> (a built-in name, a real class of that kind for the fake plugins to name)
POINTS = {POSENC_POINT: ("rope", "lengen.posenc.alibi:ALiBi"),
          ATTENTION_POINT: ("softmax", "lengen.attention.tra:ThresholdRelativeAttention"),
          SAMPLER_POINT: ("identity", "lengen.samplers.randomized:RandomizedSampler"),
          TASK_POINT: ("copy", "lengen.tasks.sequence.reverse:Reverse")}


class _Dist:
    def __init__(self, name):
        self.name = name


def _fake(monkeypatch, group_entries: dict[str, list[tuple[str, str, str]]]):
    """Installed entry points: group -> [(name, import path, package)]."""
    def entry_points(group):
        return [_with_dist(EntryPoint(n, v, group), p) for n, v, p in group_entries.get(group, [])]

    monkeypatch.setattr(registry, "entry_points", entry_points)
    monkeypatch.setattr(registry, "_WARNED", set())
    monkeypatch.setattr(registry, "_SCANNED", set())


def _with_dist(ep, package):
    object.__setattr__(ep, "dist", _Dist(package))      # as importlib.metadata sets it
    return ep


@pytest.fixture(params=list(POINTS), ids=lambda p: p.group)
def point(request):
    return request.param


def test_real_classes_exist():
    """The fakes below name real classes (a typo here would test nothing)."""
    for point, (builtin, path) in POINTS.items():
        assert builtin in point.registry
        assert point.get(path).__module__ == path.split(":")[0]


def test_a_plugin_with_a_builtin_name_is_skipped_with_one_warning(point, monkeypatch, capsys):
    builtin, path = POINTS[point]
    _fake(monkeypatch, {point.group: [(builtin, path, "rudeplug"), ("fine_one", path, "okplug")]})
    with pytest.warns(LengenWarning) as caught:
        found = point.plugins()
    assert found == {"fine_one": path}                        # the other plugin still counts
    assert point.clashes() == {builtin: {path: "rudeplug"}}
    (w,) = [str(c.message) for c in caught]
    for needle in (f"'{builtin}'", path, "package rudeplug", "built-in",
                   registry._qualname(point.registry[builtin]), f"{point.key}={path}"):
        assert needle in w, (needle, w)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                        # a second scan warns no more
        assert point.plugins() == {"fine_one": path}
        assert point.get(builtin) is point.registry[builtin]  # the built-in keeps its name
        assert point.get("fine_one").__name__ == path.split(":")[1]
        assert point.get(path).__name__ == path.split(":")[1]  # the plugin, by import path
    assert main(["list"]) == 0                                # lengen list still works
    out = capsys.readouterr()
    assert "fine_one" in out.out and f"[plugin {path}]" in out.out
    assert out.out.count(f"  {builtin} ") == 1                 # listed once: the built-in


def test_two_plugins_with_one_name_are_both_skipped(point, monkeypatch, capsys):
    builtin, path = POINTS[point]
    other = "elsewhere.module:Twin"          # never imported: the name is skipped before that
    _fake(monkeypatch, {point.group: [("twin", path, "plug_a"), ("twin", other, "plug_b"),
                                      ("fine_one", path, "okplug")]})
    with pytest.warns(LengenWarning) as caught:
        assert point.plugins() == {"fine_one": path}
    (w,) = [str(c.message) for c in caught]
    for needle in ("2 installed plugins", "'twin'", path, other, "package plug_a",
                   "package plug_b", f"{point.key}={path}"):
        assert needle in w, (needle, w)
    with pytest.raises(ConfigError, match=f"{point.key}='twin': 2 installed plugins"):
        point.get("twin")
    assert point.get(builtin) is point.registry[builtin]
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "fine_one" in out and "twin" not in out


def test_one_package_seen_twice_is_no_clash(monkeypatch):
    """The same entry point found twice (a package on two sys.path entries) claims nothing new."""
    path = POINTS[POSENC_POINT][1]
    _fake(monkeypatch, {"lengen.posencs": [("slopes", path, "p"), ("slopes", path, "p")]})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert POSENC_POINT.plugins() == {"slopes": path}


def test_a_config_naming_the_builtin_warns_about_the_shadowed_plugin(monkeypatch):
    """Naming the built-in in a config is not silent about the plugin it shadows: the first
    lookup in the process scans the plugins once."""
    builtin, path = POINTS[TASK_POINT]
    _fake(monkeypatch, {"lengen.tasks": [(builtin, path, "rudeplug")]})
    with pytest.warns(LengenWarning, match=f"'{builtin}'.*stays the built-in"):
        assert TASK_POINT.canonical(builtin) == builtin
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert TASK_POINT.canonical(builtin) == builtin       # once
