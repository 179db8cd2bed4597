"""The names a run directory holds, and the refusal to write over them.

A run directory (``lengen train --run-dir RUN``) holds ``config.json``, ``metrics.jsonl``,
``checkpoints/``, ``model.safetensors``, the training-time ``eval.json`` / ``eval.csv``, ``tb/``,
``provenance.json`` (the lengen commit, dirty state and start time: :mod:`lengen.provenance`),
``wandb.json`` / ``wandb/`` (with W&B),
the lock and earlier runs moved to ``previous/``. No output of another command may take one of
these names there: every later command on the run would fail or read other numbers. This module
sits at the bottom of the house, so both the file helpers (:mod:`lengen.fileio`) and the
run-directory machinery (:mod:`lengen.rundir.layout`) use the same list.
"""
from __future__ import annotations

import os

from lengen.errors import ConfigError

LOCK_NAME = ".lock"
PREVIOUS = "previous"
# Every name lengen writes at the top of a run directory, each used by its writer (tests/
# test_reliability.py trains a run with every option on and checks that nothing else appears)
CONFIG = "config.json"                 # lengen.train.loop, lengen.runs.reevaluate
METRICS = "metrics.jsonl"              # lengen.train.control.MetricsLog
CHECKPOINTS = "checkpoints"            # lengen.rundir.checkpoint
WEIGHTS = "model.safetensors"          # lengen.train.loop (final weights)
WEIGHTS_RECORD = "model.json"          # lengen.rundir.checkpoint.save_final_weights: its sha256
PROVENANCE = "provenance.json"         # lengen.provenance: commit, dirty state, start times
BENCH_VALIDATION = "val.json"          # lengen.bench.run: a bench run's held-out validation rows
EVAL_FILES = ("eval.json", "eval.csv")  # lengen.rundir.layout.write_rows (training's evaluation)
TENSORBOARD = "tb"                     # train.tensorboard=true
WANDB_ID = "wandb.json"                # train.wandb=true: the W&B run id a resumed run continues
WANDB_FOLDER = "wandb"                 # train.wandb=true without WANDB_DIR: wandb's own files
#: a directory holding any of these holds a run
RUN_MARKERS = (CONFIG, METRICS, CHECKPOINTS, WEIGHTS) + EVAL_FILES + (TENSORBOARD,)
#: what a run writes (no other command may write these names there)
RUN_FILES = RUN_MARKERS + (WEIGHTS_RECORD, PROVENANCE, BENCH_VALIDATION, WANDB_ID,
                           WANDB_FOLDER)
#: the folders lengen fills, where no symbolic link is followed (lengen.fileio.refuse_links_inside)
OWNED_FOLDERS = (CHECKPOINTS, TENSORBOARD, PREVIOUS)


#: names no output of a command may take in a run directory: the files above, their stems (an
#: output stem ``config`` would write ``config.json``), the lock and the ``previous/`` folder
OWNED_NAMES = frozenset(RUN_FILES) | {os.path.splitext(f)[0] for f in RUN_FILES} | {
    LOCK_NAME, PREVIOUS}


def refuse_owned_output(path: str, flag: str = "--out", shown: str | None = None,
                        example: str = "eval-long", stem: bool = False) -> None:
    """Raise ConfigError when writing ``path`` would replace a file or folder lengen owns in a run
    directory (``config.json``, ``metrics.jsonl``, checkpoints, ``model.safetensors``, the
    training-time ``eval.json`` / ``eval.csv`` ...): every later command on the run would fail or
    read other numbers. ``path`` is a full name, or with ``stem`` a stem that becomes
    ``<stem>.json`` / ``.csv`` / ``.png`` (then ``RUN/config`` is refused too); ``shown`` is how
    the user wrote it (default ``path``), ``example`` a name to suggest instead."""
    folder, name = os.path.split(os.path.normpath(path))
    if (name in OWNED_NAMES if stem else name in RUN_FILES + (LOCK_NAME, PREVIOUS)) \
            and has_run(folder or "."):
        hit = [f for f in RUN_FILES + (LOCK_NAME, PREVIOUS)
               if name == f or stem and name == os.path.splitext(f)[0]]
        keep = ", ".join(RUN_FILES + (PREVIOUS,))
        raise ConfigError(f"{flag} {shown or path} would overwrite {' / '.join(hit)} of the run "
                          f"in {folder or '.'}, which lengen owns (a run directory keeps {keep}); "
                          f"nothing was written. Choose another name, e.g. {flag} {example}")


def has_run(run_dir: str) -> bool:
    return os.path.isdir(run_dir) and any(os.path.exists(os.path.join(run_dir, f))
                                          for f in RUN_MARKERS)


__all__ = ["LOCK_NAME", "PREVIOUS", "CONFIG", "METRICS", "CHECKPOINTS", "WEIGHTS", "WEIGHTS_RECORD", "EVAL_FILES",
           "TENSORBOARD", "WANDB_ID", "WANDB_FOLDER", "RUN_MARKERS", "OWNED_FOLDERS", "RUN_FILES", "OWNED_NAMES", "has_run", "refuse_owned_output"]
