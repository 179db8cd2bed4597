"""The reliability table: one row per way lengen could betray a user, grouped in the classes of
docs/promises.md, each a case that fails on a lengen without the guard.

Classes (``CLASSES``): code from data (a file lengen reads names code: it runs only with the
user's consent), writes outside (nothing is written outside the run directory / out_dir, links
inside it are never followed), owned files (no command's output replaces a file a run owns),
hangs (a file argument that never ends, work that never finishes: refused up front), silent
results (a wrong number or an ignored typo: refused or warned) and tracebacks (an error reaches
the user as one paragraph). ``test_reliability`` runs the table; ``test_every_class_is_covered``
keeps each class in it."""
from __future__ import annotations

import builtins
import inspect
import json
import os
import shutil
import sys

import pytest

import lengen
from lengen import consent
from lengen.cli import main
from lengen.errors import ConfigError, LengenError
from lengen.runs import evaluate_run
from lengen.runfiles import LOCK_NAME, OWNED_NAMES, PREVIOUS, RUN_FILES, refuse_owned_output

CLASSES = ("code from data", "writes outside", "owned files", "hangs", "silent results",
           "tracebacks")


def tiny(**train):
    return {"name": "tiny",
            "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
            "task": {"name": "copy", "kwargs": {"max_train_length": 5}},
            "train": {"steps": 4, "batch_size": 4, "warmup_steps": 0, "progress": False,
                      "threads": 1, "log_every": 1, **train},
            "eval": {"sequences": 4, "batch_size": 4, "splits": ["len=3", "len=6"]}}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Two tiny runs: ``finished`` and ``half`` (stopped at step 2 of 4: a checkpoint, metrics,
    TensorBoard events, no final weights), copied by each case that changes them."""
    root = tmp_path_factory.mktemp("runs")
    lengen.train(tiny(), str(root / "finished"), quiet=True)
    lengen.train(tiny(tensorboard=True, ckpt_every=1), str(root / "half"), stop_at=2, quiet=True)
    return root


@pytest.fixture
def copy_run(runs, tmp_path):
    def copy(which="finished"):
        dst = tmp_path / which
        shutil.copytree(runs / which, dst, symlinks=True)
        return dst
    return copy


@pytest.fixture(autouse=True)
def no_consent():
    """Consent off, as a new process starts, and off again afterwards."""
    consent.allow_plugin_imports(False)
    consent.allow_remote_code(False)
    yield
    consent.allow_plugin_imports(False)
    consent.allow_remote_code(False)


# ---- code from data ---------------------------------------------------------------------------

SIDECAR = '''
import os
open(os.environ["LENGEN_TEST_MARKER"], "w").write("the sidecar module ran")
from lengen.posenc.nope import NoPE


class Sneaky(NoPE):
    """NoPE, imported for its side effect (a test plugin shipped inside a run directory)."""
'''


def _sidecar_run(copy_run, tmp_path, monkeypatch, module="sidecar_pe"):
    """A run directory whose config.json names ``<module>:Sneaky``, a module shipped beside it
    (and importable: the run directory is on sys.path, as the current folder is for python -m)."""
    run = copy_run("finished")
    (run / f"{module}.py").write_text(SIDECAR)
    cfg = json.loads((run / "config.json").read_text())
    cfg["model"]["posenc"] = f"{module}:Sneaky"
    (run / "config.json").write_text(json.dumps(cfg))
    marker = tmp_path / "MARKER"
    monkeypatch.setenv("LENGEN_TEST_MARKER", str(marker))
    monkeypatch.syspath_prepend(str(run))
    monkeypatch.delitem(sys.modules, module, raising=False)
    return run, marker


def case_eval_run_imports_no_module_named_by_its_config(copy_run, tmp_path, monkeypatch, capsys):
    run, marker = _sidecar_run(copy_run, tmp_path, monkeypatch)
    for argv in (["eval", str(run), "--out", "again"], ["generate", str(run), "--n", "1"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "sidecar_pe:Sneaky" in err and "--allow-plugin-imports" in err, err
        assert not marker.exists(), f"lengen {argv[0]} ran the module a run directory named"
    with pytest.raises(consent.PluginImportRefused, match="LENGEN_ALLOW_IMPORTS=1"):
        lengen.load_run(str(run))
    assert not marker.exists()
    # with the user's consent it is imported (and, a NoPE, evaluates)
    assert main(["--allow-plugin-imports", "eval", str(run), "--out", "again"]) == 0
    assert marker.exists()


def case_the_consent_is_the_environment_variable_too(copy_run, tmp_path, monkeypatch):
    run, marker = _sidecar_run(copy_run, tmp_path, monkeypatch, module="sidecar_env")
    monkeypatch.setenv(consent.ALLOW_IMPORTS_ENV, "1")
    lengen.load_run(str(run))
    assert marker.exists()


def case_a_config_typed_by_the_user_is_the_users_own(copy_run, tmp_path, monkeypatch):
    run, marker = _sidecar_run(copy_run, tmp_path, monkeypatch, module="sidecar_typed")
    cfg = lengen.resolve({"model": {"posenc": "sidecar_typed:Sneaky"}})
    assert cfg.model.posenc == "sidecar_typed:Sneaky" and marker.exists()


def _evil_hf_dir(tmp_path, monkeypatch):
    """A checkpoint directory whose config.json and tokenizer_config.json map the Auto classes
    to a module shipped in it (transformers' remote code), and a user who would answer 'y'."""
    d = tmp_path / "hf-evil"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({
        "model_type": "evil_custom", "architectures": ["EvilModel"],
        "auto_map": {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}}))
    (d / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "EvilTok", "auto_map": {"AutoTokenizer": ["evil.EvilTok", None]}}))
    (d / "evil.py").write_text(
        "import os\nopen(os.environ['LENGEN_TEST_MARKER'], 'w').write('ran')\n"
        "from transformers import PretrainedConfig, PreTrainedTokenizer\n"
        "class EvilConfig(PretrainedConfig):\n    model_type = 'evil_custom'\n"
        "class EvilTok(PreTrainedTokenizer):\n    pass\n")
    marker = tmp_path / "MARKER"
    monkeypatch.setenv("LENGEN_TEST_MARKER", str(marker))
    monkeypatch.setattr(builtins, "input", lambda *a, **k: "y")   # "Do you wish to run ...?"
    return d, marker


def case_hf_checkpoint_code_is_not_run(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    from lengen.data.tokenizers import Pretrained
    from lengen.hf.load import load_checkpoint

    d, marker = _evil_hf_dir(tmp_path, monkeypatch)
    with pytest.raises(ConfigError, match="--trust-remote-code"):
        load_checkpoint(str(d))
    with pytest.raises(ConfigError, match="--trust-remote-code"):
        Pretrained(str(d))
    assert not marker.exists(), "transformers ran the checkpoint's own code"


def case_hf_export_config_names_no_plugin(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    from lengen.hf.modeling import LengenConfig, LengenForCausalLM

    (tmp_path / "sidecar_hf.py").write_text(SIDECAR)
    marker = tmp_path / "MARKER"
    monkeypatch.setenv("LENGEN_TEST_MARKER", str(marker))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "sidecar_hf", raising=False)
    config = LengenConfig(lengen_model={"vocab_size": 8, "d_model": 16, "n_layers": 1,
                                        "n_heads": 2, "posenc": "sidecar_hf:Sneaky"})
    with pytest.raises(consent.PluginImportRefused, match="lengen_model"):
        LengenForCausalLM(config)
    assert not marker.exists()


# ---- writes outside ---------------------------------------------------------------------------

#: where a planted link may sit in a half-finished run that is then resumed to the end
LINKED_NAMES = ("metrics.jsonl", "config.json", "model.safetensors", "eval.json", "eval.csv",
                "wandb.json", LOCK_NAME, "checkpoints", "tb", "checkpoints/latest",
                "checkpoints/step_0000003")


def _snapshot(path):
    if os.path.isdir(path):
        return sorted((os.path.relpath(os.path.join(d, f), path),
                       open(os.path.join(d, f), "rb").read())
                      for d, _, fs in os.walk(path) for f in fs)
    return open(path, "rb").read()


def case_no_link_in_a_run_directory_is_followed(name, copy_run, tmp_path):
    run = copy_run("half")
    outside = tmp_path / "outside"
    outside.mkdir()
    is_dir = name in ("checkpoints", "tb") or name.startswith("checkpoints/step")
    target = outside / ("victim-dir" if is_dir else "victim.txt")
    if is_dir:
        target.mkdir()
        (target / "keep.txt").write_text("precious\n")
    else:
        target.write_text("precious\n")
    before = _snapshot(outside)
    link = run / name
    if os.path.lexists(link):
        shutil.rmtree(link) if link.is_dir() and not link.is_symlink() else link.unlink()
    link.symlink_to(target)
    with pytest.raises(LengenError, match="symbolic link"):
        lengen.train(tiny(tensorboard=True, ckpt_every=1), str(run), quiet=True)
    assert _snapshot(outside) == before, f"a link at {name} was followed"


def case_sweep_run_names_stay_inside_out_dir(name, tmp_path):
    from lengen.sweep import Grid, run_sweep

    out = tmp_path / "sweeps" / "s"
    with pytest.raises(ConfigError, match="one folder inside out_dir"):
        run_sweep({name: tiny()}, str(out), workers=1, quiet=True)
    if name in ("..", "."):
        with pytest.raises(ConfigError, match="one folder inside out_dir"):
            run_sweep(Grid(tiny(), {"train.seed": [0]}, name=name), str(out), workers=1,
                      quiet=True)
    assert not any((tmp_path / "sweeps").glob("*/config.json"))
    assert not (tmp_path / "sweeps" / "config.json").exists()


# ---- owned files ------------------------------------------------------------------------------

def case_every_file_a_run_writes_is_owned(runs, tmp_path, monkeypatch):
    """A run with every option on (TensorBoard, W&B offline when installed, checkpoints, the
    final evaluation): every name it leaves at the top of its directory is in RUN_FILES, and no
    other command's output may replace it."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_DIR", raising=False)
    try:
        import wandb  # noqa: F401
        extra = {"wandb": True}
    except ImportError:
        extra = {}
    run = tmp_path / "full"
    lengen.train(tiny(tensorboard=True, ckpt_every=1, **extra), str(run), quiet=True)
    written = set(os.listdir(run)) - {LOCK_NAME}
    assert written <= set(RUN_FILES), f"not in RUN_FILES: {written - set(RUN_FILES)}"
    if extra:
        assert {"wandb.json", "wandb"} <= written
    for name in sorted(written | {LOCK_NAME, PREVIOUS}):
        with pytest.raises(ConfigError, match="lengen owns"):
            refuse_owned_output(str(run / name), "--out")
        stem = os.path.splitext(name)[0]
        assert stem in OWNED_NAMES
        if name == LOCK_NAME:
            continue                           # not a stem --out can name
        before = _snapshot(run / name) if (run / name).exists() else None
        with pytest.raises(ConfigError, match="lengen owns"):
            evaluate_run(str(run), out=stem)
        if before is not None:
            assert _snapshot(run / name) == before


# ---- the table ---------------------------------------------------------------------------------

#: (class, case, parameter sets): each case runs once per parameter set
TABLE = [
    ("code from data", case_eval_run_imports_no_module_named_by_its_config, None),
    ("code from data", case_the_consent_is_the_environment_variable_too, None),
    ("code from data", case_a_config_typed_by_the_user_is_the_users_own, None),
    ("code from data", case_hf_checkpoint_code_is_not_run, None),
    ("code from data", case_hf_export_config_names_no_plugin, None),
    ("writes outside", case_no_link_in_a_run_directory_is_followed,
     [{"name": n} for n in LINKED_NAMES]),
    ("writes outside", case_sweep_run_names_stay_inside_out_dir,
     [{"name": n} for n in ("..", ".", "", "a/b")]),
    ("owned files", case_every_file_a_run_writes_is_owned, None),
]
ROWS = [(cls, case, kw) for cls, case, params in TABLE for kw in (params or [{}])]


def _id(row):
    cls, case, kw = row
    return f"{cls}: {case.__name__[len('case_'):]}" + (
        f"[{','.join(map(repr, kw.values()))}]" if kw else "")


@pytest.mark.parametrize("row", ROWS, ids=[_id(r) for r in ROWS])
def test_reliability(row, request):
    _cls, case, kw = row
    fixtures = {n: request.getfixturevalue(n) for n in inspect.signature(case).parameters
                if n not in kw}
    case(**fixtures, **kw)


def test_every_class_is_covered():
    assert {cls for cls, _, _ in TABLE} == set(CLASSES)
    assert all(cls in CLASSES for cls, _, _ in TABLE)
