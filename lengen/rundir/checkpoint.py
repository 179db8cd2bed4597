"""Checkpoints that survive any crash: at every instant the run directory holds a usable one.

Layout of a run directory::

    config.json                 resolved experiment config
    metrics.jsonl               one JSON object per log/eval event
    checkpoints/step_000100/    model.safetensors, state.pt, meta.json (written last: sizes and
                                SHA-256 of the other two)
    checkpoints/latest          text file naming the newest complete checkpoint
    model.safetensors           final weights (copy of the last checkpoint's)
    eval.json / eval.csv        evaluation rows
    .lock                       held by the process using the directory (lengen.rundir.layout)

Writing (:func:`save_checkpoint`): the new step folder is written completely under a temporary
name and flushed to disk (fsync), then renamed into place, then ``latest`` is replaced, and only
then are checkpoints beyond ``keep`` pruned, oldest first; the newest usable one is never removed,
and no folder is removed before its successor is in place.

Reading (:func:`resume_checkpoint`): the newest *usable* checkpoint wins: a folder whose files are
missing, truncated or fail their checksum, or whose state cannot be loaded into the model and
optimizer, is skipped with a note on stderr and the next older one is tried. If checkpoints exist
but none is usable the run refuses to start (never a silent restart from step 0).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import sys

import torch

from lengen.errors import CheckpointError, RunDirError
from lengen.fileio import (check_no_links, disk_full_message, file_digest, fresh_temporary,
                           is_disk_full, open_for_writing, save_json_atomic)
from lengen.runfiles import WEIGHTS, WEIGHTS_RECORD

_STEP_DIR = re.compile(r"^step_(\d+)$")
FORMAT = 2      # meta.json records file sizes and checksums (format 1 had none)


def fsync_dir(path: str) -> None:
    """Flush a directory entry (a rename) to disk; a no-op where directories cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_file(path: str) -> None:
    with open(path, "rb+") as f:
        os.fsync(f.fileno())


# ---- weights -----------------------------------------------------------------------------------

def save_weights(model: torch.nn.Module, path: str) -> None:
    """safetensors file written through a temporary file, flushed, then renamed into place."""
    from safetensors.torch import save_file  # start-up: only weight files need it

    # safetensors refuses shared storage: drop tied duplicates (re-tied on construction)
    state, seen = {}, set()
    for k, v in model.state_dict().items():
        if v.data_ptr() in seen:
            continue
        seen.add(v.data_ptr())
        state[k] = v.detach().contiguous().cpu()
    tmp = fresh_temporary(path)           # never a link planted at the temporary name
    save_file(state, tmp)
    _fsync_file(tmp)
    os.replace(tmp, path)


def save_final_weights(model: torch.nn.Module, run_dir: str, step: int) -> str:
    """A finished run's ``model.safetensors`` (:func:`save_weights`), then ``model.json`` with
    its size and SHA-256, which :func:`verify_final_weights` checks whenever the weights are read
    (evaluation, generation, export): flipped bytes are refused, never evaluated. -> the path."""
    path = os.path.join(run_dir, WEIGHTS)
    save_weights(model, path)
    save_json_atomic({"file": WEIGHTS, "step": step, "size": os.path.getsize(path),
                      "sha256": file_digest(path)}, os.path.join(run_dir, WEIGHTS_RECORD),
                     root=run_dir)
    return path


def verify_final_weights(run_dir: str) -> None:
    """Raise CheckpointError when ``model.safetensors`` differs from the size and SHA-256 its
    ``model.json`` records (a damaged or replaced file). A run written before lengen kept the
    record has none to check."""
    record_path = os.path.join(run_dir, WEIGHTS_RECORD)
    path = os.path.join(run_dir, WEIGHTS)
    if not os.path.isfile(record_path) or not os.path.isfile(path):
        return
    try:
        with open(record_path, encoding="utf-8") as f:
            record = json.load(f)
        size, digest = int(record["size"]), str(record["sha256"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{record_path} (the checksum of {WEIGHTS}) is unreadable "
                              f"({type(e).__name__}); the weights cannot be verified") from None
    why = (f"has {os.path.getsize(path)} bytes, {size} were written" if os.path.getsize(path)
           != size else "fails its SHA-256 checksum" if file_digest(path) != digest else None)
    if why:
        raise CheckpointError(f"{path} {why} (recorded in {WEIGHTS_RECORD}): the final weights "
                              f"are damaged or were replaced, and lengen does not evaluate them. "
                              f"Restore the file, or delete it and rerun lengen train --run-dir "
                              f"{run_dir} with the same settings (the last checkpoint holds the "
                              f"final weights and rewrites it)")


def read_weights(path: str, model: torch.nn.Module) -> dict:
    """Read a safetensors file and check it against ``model`` (names and shapes), without
    touching the model. Raises CheckpointError naming the file."""
    from safetensors.torch import load_file  # start-up: only weight files need it

    if not os.path.isfile(path):
        raise CheckpointError(f"{path} is missing")
    try:
        state = load_file(path)
    except Exception as e:  # noqa: BLE001 - SafetensorError, OSError, ... all mean unreadable
        raise CheckpointError(f"{path} is not a readable safetensors file (truncated or corrupt: "
                              f"{type(e).__name__}: {e})") from None
    want = model.state_dict()
    # tied weights (one storage under two names) were saved once, as save_weights does
    tied, seen = set(), set()
    for k, v in want.items():
        if v.data_ptr() in seen:
            tied.add(k)
        seen.add(v.data_ptr())
    missing = [k for k in want if k not in state and k not in tied]
    unexpected = [k for k in state if k not in want]
    shapes = [f"{k} {tuple(state[k].shape)} vs {tuple(want[k].shape)}" for k in state
              if k in want and state[k].shape != want[k].shape]
    if missing or unexpected or shapes:
        parts = [f"missing {missing[:5]}" if missing else "",
                 f"unexpected {unexpected[:5]}" if unexpected else "",
                 f"shape mismatch (file vs model) {shapes[:5]}" if shapes else ""]
        raise CheckpointError(f"{path} holds weights of another model ("
                              f"{'; '.join(p for p in parts if p)}); it does not match the "
                              f"run's config.json")
    return state


def load_weights(model: torch.nn.Module, path: str) -> None:
    """Load a safetensors file into ``model`` (all-or-nothing: checked first)."""
    model.load_state_dict(read_weights(path, model), strict=False)


# ---- checkpoints -------------------------------------------------------------------------------

def checkpoint_step(path: str) -> int | None:
    m = _STEP_DIR.match(os.path.basename(os.path.normpath(path)))
    return int(m.group(1)) if m else None


def checkpoint_problem(path: str, *, deep: bool = False) -> str | None:
    """Why the checkpoint folder ``path`` is unusable, or None. Cheap checks (files present,
    sizes as recorded); ``deep`` also verifies the SHA-256 of every file."""
    meta_path = os.path.join(path, "meta.json")
    for name in ("model.safetensors", "state.pt", "meta.json"):
        if not os.path.isfile(os.path.join(path, name)):
            return f"{name} is missing"
    try:
        with open(meta_path) as f:
            meta = json.load(f)
        step = int(meta["step"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"meta.json is unreadable ({type(e).__name__})"
    if checkpoint_step(path) is not None and step != checkpoint_step(path):
        return f"meta.json says step {step}"
    for name, rec in (meta.get("files") or {}).items():
        fp = os.path.join(path, name)
        if os.path.getsize(fp) != rec.get("size"):
            return (f"{name} has {os.path.getsize(fp)} bytes, {rec.get('size')} were written "
                    f"(truncated or replaced)")
        if deep and file_digest(fp) != rec.get("sha256"):
            return f"{name} fails its checksum (corrupt)"
    return None


def list_checkpoints(run_dir: str) -> list[str]:
    """Step folders in ``run_dir/checkpoints`` (complete or not), newest step first."""
    ckdir = os.path.join(run_dir, "checkpoints")
    if not os.path.isdir(ckdir):
        return []
    found = [(checkpoint_step(d), os.path.join(ckdir, d)) for d in os.listdir(ckdir)]
    return [p for s, p in sorted((x for x in found if x[0] is not None), reverse=True)]


def latest_checkpoint(run_dir: str) -> str | None:
    """The newest checkpoint folder that passes :func:`checkpoint_problem`, or None."""
    return next((p for p in list_checkpoints(run_dir) if checkpoint_problem(p) is None), None)


def save_checkpoint(run_dir: str, step: int, model, state: dict, config: dict,
                    keep: int = 2) -> str:
    """Write checkpoint ``step`` (weights + ``state``: optimizer, scheduler, RNG and task state;
    tensors, numbers, strings and containers only) crash-safely; see the module docstring.
    ``keep`` newest usable checkpoints are kept (0 = all)."""
    ckdir = check_no_links(os.path.join(run_dir, "checkpoints"), run_dir)
    os.makedirs(ckdir, exist_ok=True)
    name = f"step_{step:07d}"
    final = os.path.join(ckdir, name)
    if checkpoint_problem(final) is None:
        # a complete checkpoint of this very step exists (resumed here, or the last periodic
        # save was the final step): the training state at a step is unique, keep the one on disk
        _write_latest(ckdir, name)
        _prune(ckdir, keep)
        return final
    tmp = os.path.join(ckdir, f"{name}.tmp-{os.getpid()}")
    if os.path.islink(tmp):
        os.unlink(tmp)
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        _write_checkpoint_folder(tmp, step, model, state, config)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)   # a half-written folder helps no one
        if is_disk_full(e):
            prev = latest_checkpoint(run_dir)
            raise RunDirError(f"{disk_full_message(final)}. Checkpoint step {step} was not "
                              f"written (its temporary folder is removed); "
                              + (f"the last complete checkpoint, {prev}, is kept and training "
                                 f"resumes from it" if prev else "no earlier checkpoint exists")
                              + "; train.keep_checkpoints=1 keeps fewer on disk") from e
        raise
    if os.path.exists(final):
        # an unusable leftover of this step (a crash, a bad disk): out of the way, then replaced
        bad = os.path.join(ckdir, f"{name}.invalid-{os.getpid()}")
        os.replace(final, bad)
        os.replace(tmp, final)
        shutil.rmtree(bad, ignore_errors=True)
    else:
        os.replace(tmp, final)
    fsync_dir(ckdir)
    _write_latest(ckdir, name)
    _prune(ckdir, keep)
    return final


def _write_checkpoint_folder(tmp: str, step: int, model, state: dict, config: dict) -> None:
    """Weights, state and meta.json (sizes and checksums) into the new folder ``tmp``, synced."""
    os.makedirs(tmp)
    save_weights(model, os.path.join(tmp, "model.safetensors"))
    # tmp is the folder made just above (a planted link there fails os.makedirs)
    torch.save(dict(state, step=step), check_no_links(os.path.join(tmp, "state.pt")))
    _fsync_file(os.path.join(tmp, "state.pt"))
    files = {n: {"size": os.path.getsize(os.path.join(tmp, n)),
                 "sha256": file_digest(os.path.join(tmp, n))}
             for n in ("model.safetensors", "state.pt")}
    with open_for_writing(os.path.join(tmp, "meta.json"), "x") as f:
        json.dump({"format": FORMAT, "step": step, "files": files, "config": config}, f, indent=2,
                  default=str)
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(tmp)


def _write_latest(ckdir: str, name: str) -> None:
    tmp = fresh_temporary(os.path.join(ckdir, "latest"))
    with open_for_writing(tmp, "x") as f:
        f.write(name)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(ckdir, "latest"))
    fsync_dir(ckdir)


def _prune(ckdir: str, keep: int) -> None:
    """Remove usable checkpoints beyond the ``keep`` newest, and leftovers of interrupted writes
    (the directory is locked, so no other writer's temporary folder can be in progress).
    Unusable step folders are left for the user to inspect."""
    for d in os.listdir(ckdir):
        if re.match(r"^step_\d+\.(tmp|invalid)", d):
            shutil.rmtree(os.path.join(ckdir, d), ignore_errors=True)
        elif d.startswith("latest.tmp"):
            os.remove(os.path.join(ckdir, d))
    if keep <= 0:
        return
    usable = [p for p in list_checkpoints(os.path.dirname(ckdir)) if checkpoint_problem(p) is None]
    for old in usable[keep:]:                     # newest first: never the newest
        shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(path: str, model) -> dict:
    """Verify checkpoint ``path`` (sizes, checksums, weights matching ``model``), load its
    weights into ``model`` and return its state dict. Raises CheckpointError naming the file."""
    problem = checkpoint_problem(path, deep=True)
    if problem:
        raise CheckpointError(f"{path}: {problem}")
    weights = read_weights(os.path.join(path, "model.safetensors"), model)
    try:
        state = torch.load(os.path.join(path, "state.pt"), weights_only=True, map_location="cpu")
    except Exception as e:  # noqa: BLE001 - a zip/pickle error of any kind: unreadable
        raise CheckpointError(f"{path}/state.pt is unreadable ({type(e).__name__}: {e})") from None
    if not isinstance(state, dict) or "step" not in state:
        raise CheckpointError(f"{path}/state.pt holds no training state")
    model.load_state_dict(weights, strict=False)
    return state


def resume_checkpoint(run_dir: str, apply, log=None) -> int | None:
    """Restore the newest usable checkpoint with ``apply(path) -> step`` (which loads weights,
    optimizer, RNG and task state and raises on any mismatch) and return its step; None when the
    run has no checkpoint. Unusable checkpoints are skipped with a note on ``log`` (stderr)."""
    log = log or (lambda msg: print(msg, file=sys.stderr))
    ckdir = os.path.join(run_dir, "checkpoints")
    if os.path.exists(ckdir) and not os.path.isdir(ckdir):
        raise RunDirError(f"{ckdir} is a file, not the checkpoint folder; move it away (or pass "
                          f"--fresh to move the whole run to {run_dir}/previous/)")
    candidates = list_checkpoints(run_dir)
    pointer = os.path.join(run_dir, "checkpoints", "latest")
    named = None
    if os.path.exists(pointer):
        try:
            with open(pointer) as f:
                named = f.read(200).strip()
        except (OSError, UnicodeDecodeError):
            named = "(unreadable)"
    problems = []
    for path in candidates:
        try:
            step = apply(path)
        except (CheckpointError, ValueError, RuntimeError, KeyError, TypeError, OSError,
                EOFError) as e:
            reason = str(e) if isinstance(e, CheckpointError) else f"{type(e).__name__}: {e}"
            problems.append(reason)
            log(f"lengen: checkpoint {path} is unusable ({reason}); trying the next older one")
            continue
        if named is not None and named != os.path.basename(path):
            log(f"lengen: checkpoints/latest names {named!r}, but the newest usable checkpoint is "
                f"{os.path.basename(path)}; resuming from it")
        return step
    if candidates:
        raise RunDirError(
            f"{run_dir}/checkpoints holds {len(candidates)} checkpoint folder(s) but none is "
            f"usable ({'; '.join(problems[:3])}). Not restarting from step 0 silently: move "
            f"{run_dir}/checkpoints aside to start over, or pass --fresh (fresh=True) to move the "
            f"whole run to {run_dir}/previous/")
    return None


__all__ = ["save_checkpoint", "load_checkpoint", "resume_checkpoint", "latest_checkpoint",
           "list_checkpoints", "checkpoint_problem", "save_weights", "load_weights",
           "read_weights", "fsync_dir"]
