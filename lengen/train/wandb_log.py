"""Weights & Biases sink of the metrics log (``train.wandb=true``): the scalars TensorBoard gets
(loss, lr, grad_norm, periodic ``eval/<split>/<metric>``) at the same steps, and the final
evaluation rows as one ``wandb.Table`` (``eval/rows``). ``wandb`` is imported only here, only
when enabled (the optional extra ``lengen[wandb]``).

Settings: ``train.wandb_project`` (default ``lengen``), ``train.wandb_name`` (default: the
experiment ``name``, else the run directory's name), ``train.wandb_tags``; the entity, mode
(``WANDB_MODE=offline``) and API key come from wandb's own environment variables. The W&B files
go to ``WANDB_DIR`` when set, else into the run directory (``<run_dir>/wandb/``). The W&B run id is
kept in ``<run_dir>/wandb.json`` so a resumed lengen run continues the same W&B run (W&B drops
points logged again at steps it already has, i.e. the steps between the last checkpoint and an
interruption); ``--fresh`` moves that file aside with the old run, so a new W&B run starts.
"""
from __future__ import annotations

import json
import math
import os
import secrets
import string

from lengen.config import WANDB_MISSING as MISSING
from lengen.errors import ConfigError, LengenError
from lengen.fileio import check_no_links, save_json_atomic
from lengen.runfiles import WANDB_FOLDER, WANDB_ID

ID_FILE = WANDB_ID


def _scalar(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


class WandbSink:
    def __init__(self, run_dir: str, *, project: str, name: str, tags, config: dict):
        try:
            import wandb  # optional dependency
        except ImportError as e:
            raise ConfigError(MISSING) from e
        self.wandb = wandb
        id_path = os.path.join(run_dir, ID_FILE)
        run_id = None
        if os.path.isfile(id_path):
            try:
                with open(id_path, encoding="utf-8") as f:
                    run_id = json.load(f)["id"]
            except (ValueError, OSError, KeyError, TypeError):
                run_id = None              # unreadable: start a new W&B run
        if not isinstance(run_id, str) or not run_id:
            # W&B's own form of id: 8 lowercase letters / digits
            run_id = "".join(secrets.choice(string.ascii_lowercase + string.digits)
                             for _ in range(8))
            save_json_atomic({"id": run_id, "project": project}, id_path, root=run_dir)
        # read here at every run (wandb itself reads its environment once per process)
        where = os.environ.get("WANDB_DIR") or run_dir
        if where == run_dir:           # wandb's own folder in the run directory: never a link
            check_no_links(os.path.join(run_dir, WANDB_FOLDER), run_dir)
        try:
            self.run = wandb.init(project=project, name=name, tags=list(tags or []),
                                  config=config, id=run_id, resume="allow", dir=where)
        except Exception as e:  # noqa: BLE001 - wandb raises its own types (login, network)
            raise LengenError(f"train.wandb=true: wandb.init failed ({type(e).__name__}: {e}). "
                              f"Log in with `wandb login`, or run offline with "
                              f"WANDB_MODE=offline (sync later with `wandb sync`), or set "
                              f"train.wandb=false") from e

    def log(self, step: int, values: dict) -> None:
        scalars = {k: v for k, v in values.items() if _scalar(v)}
        if scalars:
            self.run.log(scalars, step=step)

    def table(self, step: int, rows: list[dict]) -> None:
        """The evaluation rows (one per split x metric) as ``eval/rows``: the union of the rows'
        keys as columns, in first-seen order; values that are not numbers or strings as JSON."""
        columns: list[str] = []
        for r in rows:
            columns += [k for k in r if k not in columns]

        def cell(v):
            if v is None or isinstance(v, (bool, int, float, str)):
                return v
            return json.dumps(v, default=str)

        data = [[cell(r.get(c)) for c in columns] for r in rows]
        self.run.log({"eval/rows": self.wandb.Table(columns=columns, data=data)}, step=step)

    def close(self, failed: bool = False) -> None:
        self.run.finish(exit_code=1 if failed else 0)


__all__ = ["WandbSink", "MISSING"]
