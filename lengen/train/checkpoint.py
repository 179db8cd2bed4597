"""Checkpoints: a folder per step with safetensors weights, the resolved config as JSON, and the
optimizer / scheduler / RNG state, written into a temporary folder and renamed into place, then
pointed to by ``latest`` (also replaced atomically). An interrupted write never leaves a
checkpoint that looks complete.

Layout of a run directory::

    config.json                 resolved experiment config
    metrics.jsonl               one JSON object per log/eval event
    checkpoints/step_000100/    model.safetensors, state.pt, meta.json
    checkpoints/latest          text file naming the newest complete checkpoint
    model.safetensors           final weights (copy of the last checkpoint's)
    eval.json / eval.csv        evaluation rows
"""
from __future__ import annotations

import json
import os
import shutil

import torch
from safetensors.torch import load_file, save_file

from lengen.config import save_json_atomic


def save_weights(model: torch.nn.Module, path: str) -> None:
    # safetensors refuses shared storage: drop tied duplicates (re-tied on construction)
    state, seen = {}, set()
    for k, v in model.state_dict().items():
        if v.data_ptr() in seen:
            continue
        seen.add(v.data_ptr())
        state[k] = v.detach().contiguous().cpu()
    tmp = path + ".tmp"
    save_file(state, tmp)
    os.replace(tmp, path)


def load_weights(model: torch.nn.Module, path: str) -> None:
    state = load_file(path)
    missing, unexpected = model.load_state_dict(state, strict=False)
    tied = {"head.weight"} if getattr(model, "cfg", None) is not None and model.cfg.tie_embeddings else set()
    missing = [m for m in missing if m not in tied]
    if missing or unexpected:
        raise ValueError(f"{path} does not match the model: missing {missing}, unexpected {unexpected}")


def save_checkpoint(run_dir: str, step: int, model, optimizer, scheduler, data_gen: torch.Generator,
                    config: dict, keep: int = 2) -> str:
    ckdir = os.path.join(run_dir, "checkpoints")
    os.makedirs(ckdir, exist_ok=True)
    name = f"step_{step:07d}"
    final, tmp = os.path.join(ckdir, name), os.path.join(ckdir, name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    save_weights(model, os.path.join(tmp, "model.safetensors"))
    torch.save({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "torch_rng": torch.get_rng_state(), "data_rng": data_gen.get_state(), "step": step},
               os.path.join(tmp, "state.pt"))
    with open(os.path.join(tmp, "meta.json"), "w") as f:
        json.dump({"step": step, "config": config}, f, indent=2, default=str)
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    latest_tmp = os.path.join(ckdir, "latest.tmp")
    with open(latest_tmp, "w") as f:
        f.write(name)
    os.replace(latest_tmp, os.path.join(ckdir, "latest"))
    # prune old checkpoints, never the newest
    done = sorted(d for d in os.listdir(ckdir) if d.startswith("step_") and not d.endswith(".tmp"))
    for old in done[:-keep] if keep > 0 else []:
        shutil.rmtree(os.path.join(ckdir, old), ignore_errors=True)
    return final


def latest_checkpoint(run_dir: str) -> str | None:
    pointer = os.path.join(run_dir, "checkpoints", "latest")
    if not os.path.exists(pointer):
        return None
    with open(pointer) as f:
        path = os.path.join(run_dir, "checkpoints", f.read().strip())
    return path if os.path.exists(os.path.join(path, "state.pt")) else None


def load_checkpoint(path: str, model, optimizer, scheduler, data_gen: torch.Generator) -> int:
    load_weights(model, os.path.join(path, "model.safetensors"))
    state = torch.load(os.path.join(path, "state.pt"), weights_only=True)
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["torch_rng"])
    data_gen.set_state(state["data_rng"])
    return int(state["step"])


__all__ = ["save_checkpoint", "load_checkpoint", "latest_checkpoint", "save_weights",
           "load_weights", "save_json_atomic"]
