"""Run directories: one process at a time, never two runs mixed in one, nothing deleted silently.

* :class:`RunDirLock` holds an exclusive ``fcntl.flock`` on ``RUN_DIR/.lock`` for the whole of a
  training or evaluation; a second process fails at once, naming the holder's pid. (POSIX only;
  where ``fcntl`` is missing the lock is a no-op. ``flock`` may not lock across the nodes of a
  network file system.)
* :func:`check_same_run` refuses to resume when the stored config differs from the new one in any
  key that changes what is computed (``lengen.config.RESUME_IGNORED`` lists the harmless ones).
* :func:`move_aside` (``--fresh``) moves an old run into ``RUN_DIR/previous/<time>/`` instead of
  deleting it.
* :func:`write_rows` writes evaluation rows (``eval.json`` / ``eval.csv``) atomically.
* :func:`truncate_metrics` drops ``metrics.jsonl`` lines written after the checkpoint a run resumes
  from (a hard kill leaves some behind, and a torn last line), so the resumed run's lines are
  not duplicated.
"""
from __future__ import annotations

import json
import os
import socket
import sys
import time

from lengen.config import RESUME_IGNORED, ExperimentConfig, _deep_merge, config_diff
from lengen.errors import ArgumentError, ConfigError, RunDirError
from lengen.fileio import (check_no_links, fresh_temporary, open_for_writing,
                           refuse_links_inside, save_json_atomic, write_csv_atomic)
from lengen.rundir.checkpoint import list_checkpoints

# the names a run directory holds, and the refusal to write over them, sit below the file
# helpers that also use them (lengen.runfiles)
from lengen.runfiles import (LOCK_NAME, OWNED_NAMES, PREVIOUS, RUN_FILES,  # noqa: F401
                             has_run, refuse_owned_output)

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None


def check_run_dir(run_dir, what: str = "run_dir") -> str:
    """``run_dir`` as a ``str`` path, or a clear error: a path is a ``str`` or ``os.PathLike``
    (an int or None is an :class:`ArgumentError`), and an empty path is refused (the CLI's
    ``--run-dir ""`` once fell back to the default directory without a word)."""
    if isinstance(run_dir, bytes) or not isinstance(run_dir, (str, os.PathLike)):
        raise ArgumentError(f"{what} must be a path (a str or pathlib.Path naming a run "
                            f"directory), got {type(run_dir).__name__} {run_dir!r}; pass e.g. "
                            f"'runs/my-run'")
    path = os.fspath(run_dir)
    if not isinstance(path, str):
        raise ArgumentError(f"{what} must be a text path, got {type(path).__name__} {path!r}")
    if not path.strip():
        raise ConfigError(f"{what} is empty ({path!r}); give a run directory such as runs/my-run "
                          f"(--run-dir DIR on the command line)")
    if "\0" in path:
        raise ConfigError(f"{what} {path!r} contains a NUL character; give a plain path")
    return path


class RunDirLock:
    """``with RunDirLock(run_dir, "train"): ...`` - exclusive use of ``run_dir``."""

    def __init__(self, run_dir: str, purpose: str = "train"):
        self.run_dir, self.purpose, self.fd = run_dir, purpose, None
        self.path = os.path.join(run_dir, LOCK_NAME)

    def __enter__(self):
        if os.path.exists(self.run_dir) and not os.path.isdir(self.run_dir):
            raise RunDirError(f"run directory {self.run_dir} is a file, not a directory; choose "
                              f"another --run-dir")
        try:
            os.makedirs(self.run_dir, exist_ok=True)
            check_no_links(self.path)        # never a link planted at .lock
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0),
                              0o644)
            refuse_links_inside(self.run_dir)
        except OSError as e:
            raise RunDirError(f"cannot use run directory {self.run_dir}: {e.strerror or e}") from None
        if fcntl is None:
            return self
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(self.fd, 200, 0).decode(errors="replace").strip() or "unknown"
            os.close(self.fd)
            self.fd = None
            raise RunDirError(f"run directory {self.run_dir} is in use by another lengen process "
                              f"({holder}); wait for it to finish or stop it, or use another "
                              f"--run-dir (lock file {self.path})") from None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"pid {os.getpid()} on {socket.gethostname()}, {self.purpose} since "
                           f"{time.strftime('%Y-%m-%d %H:%M:%S')}".encode(), 0)
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            if fcntl is not None:
                os.ftruncate(self.fd, 0)
                fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None
        return False


def move_aside(run_dir: str) -> str | None:
    """Move everything in ``run_dir`` except the lock and earlier ``previous/`` runs into
    ``run_dir/previous/<time>-<pid>/``; returns that folder (None if there was nothing)."""
    if not os.path.isdir(run_dir):
        return None
    entries = [e for e in os.listdir(run_dir) if e not in (LOCK_NAME, PREVIOUS)]
    if not entries:
        return None
    dest = os.path.join(run_dir, PREVIOUS, f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}")
    check_no_links(dest, run_dir)
    os.makedirs(dest)
    for e in entries:
        os.replace(os.path.join(run_dir, e), os.path.join(dest, e))
    return dest


def read_stored_config(run_dir: str) -> dict | None:
    """The config a run directory's run was started with: ``config.json``, or when that is
    missing or unreadable, the newest checkpoint's ``meta.json``. None when neither exists.
    Training keys added to lengen after the run was made (e.g. ``train.precision``) are filled
    with their defaults, which are the behaviour such runs had, so they still resume."""
    sources = [os.path.join(run_dir, "config.json")]
    sources += [os.path.join(p, "meta.json") for p in list_checkpoints(run_dir)]
    for path in sources:
        try:
            with open(path) as f:
                d = json.load(f)
        except (OSError, ValueError):
            continue
        d = d.get("config") if path.endswith("meta.json") else d
        if isinstance(d, dict):
            # a key added to lengen after the run was stored (any section) takes its default
            return _deep_merge(ExperimentConfig().to_dict(), d)
    return None


def stored_changes(run_dir: str, new: dict) -> list | None:
    """How the config stored in ``run_dir`` differs from ``new`` in the keys that change what is
    computed (``config_diff`` rows, [] when the same run), or None when it stores no readable
    config. The one comparison a resume (:func:`check_same_run`) and a bench's pre-flight make."""
    stored = read_stored_config(run_dir) if os.path.isdir(run_dir) else None
    return None if stored is None else config_diff(stored, new, RESUME_IGNORED)


def check_same_run(run_dir: str, new: dict) -> None:
    """Raise RunDirError if ``run_dir`` holds a run whose config differs from ``new`` in a key
    that changes what is computed (or whose config cannot be read at all)."""
    if not has_run(run_dir):
        return
    fix = (f"Rerun with the stored settings (in {os.path.join(run_dir, 'config.json')}) to "
           f"resume, pass --fresh (fresh=True) to move the old run to "
           f"{os.path.join(run_dir, PREVIOUS)}/ and start over, or use another --run-dir")
    diff = stored_changes(run_dir, new)
    if diff is None:
        raise RunDirError(f"{run_dir} holds run files but no readable config.json or checkpoint "
                          f"config, so it cannot be checked against this run. {fix}")
    if diff:
        shown = "; ".join(f"{k}: {a!r} -> {b!r}" for k, a, b in diff[:6])
        more = f" (and {len(diff) - 6} more)" if len(diff) > 6 else ""
        raise RunDirError(f"{run_dir} holds a run with a different config ({shown}{more}); "
                          f"resuming would mix two runs. {fix}")


def truncate_metrics(run_dir: str, step: int, log=None) -> int:
    """Keep only ``metrics.jsonl`` lines with ``step <= step`` (and drop unparsable ones);
    returns how many were dropped."""
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return 0
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    keep, dropped = [], 0
    for ln in lines:
        if not ln.strip():
            continue
        try:
            ok = int(json.loads(ln)["step"]) <= step
        except (ValueError, KeyError, TypeError):
            ok = False
        if ok:
            keep.append(ln)
        else:
            dropped += 1
    if dropped:
        tmp = fresh_temporary(path, run_dir)
        with open_for_writing(tmp, "xb") as f:
            f.write(b"".join(ln + b"\n" for ln in keep))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        (log or (lambda m: print(m, file=sys.stderr)))(
            f"lengen: dropped {dropped} line(s) of {path} written after step {step} by the "
            f"interrupted run (they are recomputed identically)")
    return dropped


def run_meta(cfg, run_dir: str) -> dict:
    """The columns every evaluation row of a run carries (run name, task, scheme, seeds)."""
    m = cfg.model
    # a Hugging Face backbone's scheme and attention are its architecture's (hf:llama, hf:gpt2)
    pe = m.posenc if m.backbone == "lengen" else f"hf:{m.hf_config.get('model_type')}"
    return {"run": cfg.name or os.path.basename(os.path.normpath(run_dir)), "task": cfg.task.name,
            "pe": pe, "attention": m.attention if m.backbone == "lengen" else pe,
            "positions": m.positions, "seed": cfg.train.seed, "data_seed": cfg.train.data_seed}


def write_rows(rows, run_dir, stem: str = "eval"):
    """``RUN_DIR/<stem>.json`` and ``.csv``, each written through a temporary file and renamed."""
    save_json_atomic(rows, os.path.join(run_dir, f"{stem}.json"), root=run_dir)
    write_csv_atomic(rows, os.path.join(run_dir, f"{stem}.csv"), root=run_dir)


__all__ = ["check_run_dir", "RunDirLock", "has_run", "move_aside", "read_stored_config",
           "stored_changes", "check_same_run", "truncate_metrics", "run_meta", "write_rows",
           "refuse_owned_output", "RUN_FILES", "OWNED_NAMES", "PREVIOUS"]
