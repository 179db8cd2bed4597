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
import signal
import subprocess
import sys
import time

import pytest
import torch

import lengen
from lengen import consent
from lengen.cli import main
from lengen.errors import ConfigError, LengenError
from lengen.runs import evaluate_run
from lengen.runfiles import (LOCK_NAME, OWNED_NAMES, PREVIOUS, RUN_FILES, WANDB_FOLDER,
                             refuse_owned_output)

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
    for meta in run.glob("checkpoints/step_*/meta.json"):     # a consistent run directory
        m = json.loads(meta.read_text())
        m["config"]["model"]["posenc"] = f"{module}:Sneaky"
        meta.write_text(json.dumps(m))
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
    assert cfg.config.model.posenc == "sidecar_typed:Sneaky" and marker.exists()


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
LINKED_NAMES = RUN_FILES + (LOCK_NAME, PREVIOUS, "checkpoints/latest", "checkpoints/step_0000003",
                            "tb/events.out")


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
    is_dir = name in ("checkpoints", "tb", "wandb", PREVIOUS) or name.startswith("checkpoints/s")
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
        # wandb/ is W&B's own folder, which its service process may still be flushing after
        # the run returned: compared, it made this test flaky; the refusal is what is tested
        before = (_snapshot(run / name) if (run / name).exists() and name != WANDB_FOLDER
                  else None)
        with pytest.raises(ConfigError, match="lengen owns"):
            evaluate_run(str(run), out=stem)
        if before is not None:
            assert _snapshot(run / name) == before


# ---- hangs ------------------------------------------------------------------------------------

def _lengen(*args, timeout=120, env=None):
    """``python -m lengen ARGS`` in a subprocess (a hang fails by timeout, not by blocking the
    test session)."""
    return subprocess.run([sys.executable, "-m", "lengen", *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


def case_a_fifo_as_a_file_argument_is_refused(tmp_path):
    fifo = tmp_path / "variants.yaml"
    os.mkfifo(fifo)
    try:
        proc = _lengen("bench", "--variants", str(fifo), "--scale", "smoke", "--out",
                       str(tmp_path / "b"), timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("lengen bench --variants FIFO blocked")
    assert proc.returncode == 2 and "named pipe" in proc.stderr and "--variants" in proc.stderr


def case_evaluation_work_is_bounded_before_training(tmp_path):
    """eval.sequences=1e12 trained, then spun in the final evaluation (a subprocess: a lengen
    without the bound would hang the test session)."""
    small = ["model.d_model=16", "model.n_layers=1", "model.n_heads=2", "task.name=copy",
             "task.kwargs.max_train_length=5", "train.steps=2", "train.threads=1",
             "train.progress=false"]
    for extra in (["eval.sequences=1e12"],
                  ["train.eval_every=1", "train.eval_sequences=1000000000000"]):
        run = tmp_path / "run"
        try:
            proc = _lengen("train", "--run-dir", str(run), *small, *extra, timeout=120)
        except subprocess.TimeoutExpired:
            pytest.fail(f"lengen train {' '.join(extra)} did not end")
        assert proc.returncode == 2 and "floating-point operations" in proc.stderr, proc.stderr
        assert not run.exists()                # refused before anything was written


def case_sigterm_saves_a_checkpoint_as_ctrl_c_does(tmp_path):
    run = tmp_path / "run"
    script = (f"import lengen, sys\ntry:\n    lengen.train({tiny(steps=10 ** 6)!r}, {str(run)!r},"
              f" quiet=True)\nexcept KeyboardInterrupt:\n    sys.exit(130)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (
                (run / "metrics.jsonl").exists()
                and len((run / "metrics.jsonl").read_text().splitlines()) >= 3):
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "SIGTERM received" in err
    from lengen.rundir.checkpoint import latest_checkpoint

    assert latest_checkpoint(str(run)) is not None, "SIGTERM lost the run's progress"


# ---- silent results ---------------------------------------------------------------------------

def case_damaged_final_weights_are_refused(copy_run, capsys):
    run = copy_run("finished")
    weights = run / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-3] ^= 0x40                                   # one flipped bit in a weight
    weights.write_bytes(bytes(data))
    with pytest.raises(LengenError, match="fails its SHA-256 checksum"):
        lengen.load_run(str(run))
    argvs = [["eval", str(run), "--out", "again"], ["generate", str(run), "--n", "1"]]
    try:
        import transformers  # noqa: F401
        argvs.append(["export", str(run), str(run.parent / "export")])
    except ImportError:
        pass
    for argv in argvs:
        assert main(argv) == 2, argv
        assert "checksum" in capsys.readouterr().err


def case_bench_variant_typos_are_errors(tmp_path, capsys):
    out = str(tmp_path / "bench")
    for variant, needle in (("model.posenc=ropee", "unknown positional scheme"),
                            ("model.posenc_kwarg.base=10", "unknown config key"),
                            ("model.posenc=rope model.posenc_kwargs.factr=2", "unknown key 'factr'"),
                            ("", "empty variant")):
        assert main(["bench", "--variant", variant, "--scale", "smoke", "--cells", "flipflop",
                     "--out", out]) == 2, variant
        assert needle in capsys.readouterr().err
    assert main(["bench", "--variant", "model.posenc=rope", "--scale", "smoke", "--cells",
                 "flipflop", "--baselines", str(tmp_path / "missing.csv"), "--out", out]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not os.path.exists(out)                     # refused before any cell ran


def case_an_edited_config_is_checked_against_the_checkpoint(copy_run):
    run = copy_run("finished")
    cfg = json.loads((run / "config.json").read_text())
    assert cfg["model"]["posenc"] == "nope"
    cfg["model"]["posenc"] = "alibi"
    (run / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(LengenError, match=r"model.posenc: 'nope' in the checkpoint, 'alibi'"):
        lengen.load_run(str(run))


class _InfAtEval:
    """Mixed into a sampler: its evaluation positions end in +inf."""

    def sample(self, length, **kw):
        pos = super().sample(length, **kw)
        return pos if kw.get("training") else torch.where(
            torch.arange(pos.shape[-1]) == pos.shape[-1] - 1, torch.inf, pos)


def case_non_finite_positions_are_refused_at_evaluation(runs):
    from lengen.samplers import SAMPLERS

    _, task, model = lengen.load_run(str(runs / "finished"))
    for name in ("identity", "randomized"):     # deterministic, and drawn at evaluation
        base = SAMPLERS[name]
        model.sampler = type("Inf", (_InfAtEval, base), {})(
            **({"max_length": 64} if name == "randomized" else {}))
        with pytest.raises(ConfigError, match="non-finite evaluation positions"):
            lengen.evaluate(model, task, ["len=3"], n_sequences=4, batch_size=4)


def case_hf_checkpoint_on_another_task_is_refused(copy_run, tmp_path):
    pytest.importorskip("transformers")
    from lengen.runs import evaluate_hf

    run = copy_run("finished")
    assert main(["export", str(run), str(tmp_path / "hf")]) == 0
    for other in ("flipflop", "reverse"):        # another vocabulary; the same one (104 ids)
        with pytest.raises(ConfigError, match="trained on task 'copy'|another task"):
            evaluate_hf(str(tmp_path / "hf"), other, str(tmp_path / f"out-{other}"),
                        splits=None, sequences=4, batch_size=4)


def case_invalid_rope_scaling_is_refused():
    pytest.importorskip("transformers")
    from transformers import LlamaConfig

    from lengen.hf.load import apply_rope_scaling

    for scaling in ({"rope_type": "linear", "factor": -2}, {"rope_type": "linear", "factor": 0},
                    {"rope_type": "yarn", "factor": 2, "beta_fast": float("nan")}):
        with pytest.raises(ConfigError, match="--rope-scaling"):
            apply_rope_scaling(LlamaConfig(), scaling)


def case_an_encoder_is_not_scored_on_a_decoder_task(runs):
    cfg = lengen.resolve({"model": {"d_model": 16, "n_layers": 1, "n_heads": 2,
                                    "causal": False},
                          "task": {"name": "even_pairs"}})
    from lengen.rundir.load import prepare

    _, encoder = prepare(cfg)
    with pytest.raises(ConfigError, match="bidirectional encoder"):
        lengen.evaluate(encoder, lengen.build_task("copy"), ["len=3"], n_sequences=2,
                        batch_size=2)


def case_thread_counts_are_bounded():
    from lengen.threads import MAX_THREADS, use_threads

    with pytest.raises(ConfigError, match="train.threads"):
        lengen.resolve(tiny(threads=100000))
    with pytest.raises(ConfigError, match=str(MAX_THREADS)):
        use_threads(100000, 16)


# ---- tracebacks -------------------------------------------------------------------------------

BROKEN = """
import torch
from lengen.posenc.base import PositionalScheme
from lengen.tasks.sequence.copy import Copy


class WrongShapeBias(PositionalScheme):
    \"\"\"A scheme whose bias has the wrong shape (a test plugin).\"\"\"
    has_bias = True

    def bias(self, pos_q, pos_k, q=None, k=None):
        return torch.zeros(3, 5, 7)


class OutOfRange(Copy):
    \"\"\"Copy whose training batches hold an id past the vocabulary (a test plugin).\"\"\"

    def train_batch(self, *a, **kw):
        batch = super().train_batch(*a, **kw)
        batch.inputs[0, 0] = self.vocab_size + 7
        return batch
"""


def case_a_broken_plugin_fails_training_with_one_paragraph(tmp_path, monkeypatch, capsys):
    (tmp_path / "broken_plugin.py").write_text(BROKEN)
    monkeypatch.syspath_prepend(str(tmp_path))
    for section, name in (("model.posenc", "broken_plugin:WrongShapeBias"),
                          ("task.name", "broken_plugin:OutOfRange")):
        run = tmp_path / name.split(":")[1]
        argv = ["train", "--run-dir", str(run), f"{section}={name}", "model.d_model=16",
                "model.n_layers=1", "model.n_heads=2", "train.steps=2", "train.threads=1",
                "train.progress=false"]
        if section == "task.name":
            argv.append("task.kwargs.max_train_length=5")
        assert main(argv) == 2, name
        err = capsys.readouterr().err
        assert f"lengen check {name}" in err and "unexpected" not in err, err
        assert "plugin" in err


def case_ctrl_c_while_starting_up_prints_one_line():
    """A Ctrl-C inside ``import torch`` (the first second of every lengen command)."""
    script = ("import builtins, os, signal, sys\nsys.argv = ['lengen']\n"
              "real = builtins.__import__\n"
              "def hook(name, *a, **k):\n"
              "    if name == 'torch':\n"
              "        builtins.__import__ = real\n"
              "        os.kill(os.getpid(), signal.SIGINT)\n"
              "    return real(name, *a, **k)\n"
              "builtins.__import__ = hook\nimport lengen\n")
    # a terminal's Ctrl-C: SIGINT at its default, which Python turns into KeyboardInterrupt. A
    # test runner started in the background (`cmd &` in a script, nohup) inherits SIGINT
    # ignored, and Python then leaves it ignored: the kill would do nothing and the case fail
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.returncode == 130, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip() == "lengen: interrupted while starting up; nothing was run"


def case_lengen_check_does_not_call_a_task_a_scheme(capsys):
    assert main(["check", "no_such_pkg_for_lengen.tasks:MyTask"]) == 2
    err = capsys.readouterr().err
    assert "no_such_pkg_for_lengen" in err and "positional scheme" not in err, err


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
    ("hangs", case_a_fifo_as_a_file_argument_is_refused, None),
    ("hangs", case_evaluation_work_is_bounded_before_training, None),
    ("silent results", case_sigterm_saves_a_checkpoint_as_ctrl_c_does, None),
    ("silent results", case_damaged_final_weights_are_refused, None),
    ("silent results", case_bench_variant_typos_are_errors, None),
    ("silent results", case_an_edited_config_is_checked_against_the_checkpoint, None),
    ("silent results", case_non_finite_positions_are_refused_at_evaluation, None),
    ("silent results", case_hf_checkpoint_on_another_task_is_refused, None),
    ("silent results", case_invalid_rope_scaling_is_refused, None),
    ("silent results", case_an_encoder_is_not_scored_on_a_decoder_task, None),
    ("tracebacks", case_thread_counts_are_bounded, None),
    ("tracebacks", case_a_broken_plugin_fails_training_with_one_paragraph, None),
    ("tracebacks", case_ctrl_c_while_starting_up_prints_one_line, None),
    ("tracebacks", case_lengen_check_does_not_call_a_task_a_scheme, None),
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


def test_a_gpu_sized_scale_on_a_cpu_warns(monkeypatch):
    """``lengen reproduce ... --scale paper`` on a machine without a GPU starts runs of seconds
    per step: it says so (issue 55, first contact)."""
    import warnings

    from lengen.errors import LengenWarning
    from lengen.recipes.common import default_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.warns(LengenWarning, match="sized for a GPU"):
        assert default_device("paper") == "cpu"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert default_device("cpu") == "cpu"
