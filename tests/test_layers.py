"""The house reads bottom-up: every module of lengen sits in one layer of ``LAYERS`` (the table of
docs/architecture.md) and imports only its own layer and those below; no two packages import
each other; and no module imports one that imports it back. Every import counts, including those
inside functions, so a new upward import fails here however it is written. A new package or
top-level module must be given a layer below (the test names it)."""
from __future__ import annotations

import ast
import pathlib

import pytest
from test_recipe_import_order import circles   # one circle finder (Tarjan) for both

ROOT = pathlib.Path(__file__).resolve().parents[1]

#: bottom-up; a module belongs to the layer of its longest matching prefix
LAYERS = [
    ("ground", ["lengen.errors", "lengen.fileio", "lengen.checks", "lengen.registry",
                "lengen.config_files", "lengen.cliutil", "lengen.runtime", "lengen.runfiles",
                "lengen.provenance", "lengen.threads", "lengen.consent", "lengen.startup"]),
    ("building blocks", ["lengen.samplers", "lengen.ops", "lengen.tasks", "lengen.data"]),
    ("mechanisms", ["lengen.posenc", "lengen.attention"]),
    ("model", ["lengen.model"]),
    ("config", ["lengen.config"]),
    ("run directories", ["lengen.rundir"]),
    ("evaluation", ["lengen.eval"]),
    ("analysis", ["lengen.analysis", "lengen.contracts", "lengen.hf"]),
    ("training", ["lengen.train"]),
    ("orchestration", ["lengen.runs", "lengen.sweep", "lengen.recipes", "lengen.bench"]),
    ("entry points", ["lengen.cli", "lengen.__main__", "lengen"]),
]


def modules() -> dict[str, pathlib.Path]:
    out = {}
    for f in sorted((ROOT / "lengen").rglob("*.py")):
        parts = f.relative_to(ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def layer_of(mod: str) -> int | None:
    best = None
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (mod == p or mod.startswith(p + ".")) and (best is None or len(p) > best[1]):
                best = (i, len(p))
    return best[0] if best else None


def imports(mods) -> list[tuple[str, str]]:
    """(importer, imported module of lengen) for every import statement, at any depth."""
    out = []
    for mod, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                while name and name not in mods:
                    name = name.rpartition(".")[0]
                if name.startswith("lengen") and name != mod:
                    out.append((mod, name))
    return out


MODS = modules()
EDGES = imports(MODS)


def test_every_module_has_a_layer():
    missing = [m for m in MODS if layer_of(m) is None or (layer_of(m) == len(LAYERS) - 1 and
                                                           m not in ("lengen", "lengen.cli",
                                                                     "lengen.__main__"))]
    assert not missing, f"give these modules a layer in LAYERS: {missing}"


def test_no_import_runs_up():
    up = [f"{a} ({LAYERS[layer_of(a)][0]}) imports {b} ({LAYERS[layer_of(b)][0]})"
          for a, b in EDGES if layer_of(b) > layer_of(a)]
    assert not up, "imports that run back up:\n" + "\n".join(sorted(set(up)))


#: pairs of layers that must not import each other at all, though one sits above the other
NEVER = [("lengen.train", "lengen.analysis", "plots are drawn by callers, not the training loop"),
         ("lengen.analysis", "lengen.train", "analysis reads rows and runs, it never trains")]


def test_the_nevers():
    broken = [f"{a} imports {b}: {why}" for a, b in EDGES for x, y, why in NEVER
              if (a == x or a.startswith(x + ".")) and (b == y or b.startswith(y + "."))]
    assert not broken, "\n".join(sorted(set(broken)))


def package(mod: str) -> str:
    parts = mod.split(".")
    return ".".join(parts[:3] if parts[1:2] == ["recipes"] else parts[:2])


def test_no_two_packages_import_each_other():
    pairs = {(package(a), package(b)) for a, b in EDGES if package(a) != package(b)}
    both = sorted(f"{a} <-> {b}" for a, b in pairs if (b, a) in pairs and a < b)
    assert not both, "packages that import each other:\n" + "\n".join(both)


def test_no_module_circles():
    graph = {m: set() for m in MODS}
    for a, b in EDGES:
        graph[a].add(b)
    sccs = circles(graph)
    assert not sccs, "modules that import each other (directly or round a circle):\n" + \
        "\n".join(" <-> ".join(c) for c in sccs)


@pytest.mark.parametrize("bad,expect", [
    (("lengen.samplers.skew", "lengen.analysis.idealized"), "run back up"),
])
def test_the_check_can_fail(bad, expect):
    a, b = bad
    assert layer_of(b) > layer_of(a)          # the kind of import the test above refuses
