"""What the training loop keeps beside the maths: the metrics log and the Ctrl-C handler."""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

from lengen.errors import ConfigError
from lengen.fileio import check_no_links, open_for_writing


class MetricsLog:
    """``metrics.jsonl`` always; TensorBoard (``<run_dir>/tb``) and Weights & Biases
    (:mod:`lengen.train.wandb_log`; ``wandb`` = its settings, or None) when enabled, each given
    the same numeric values at the same steps."""

    def __init__(self, run_dir, tensorboard: bool, wandb: dict | None = None):
        self.run_dir, self.path = run_dir, os.path.join(run_dir, "metrics.jsonl")
        self.tb = self.wb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter  # optional dependency
            except ImportError as e:
                raise ConfigError("train.tensorboard=true needs TensorBoard: pip install "
                                  "'lengen[tensorboard]' (or set train.tensorboard=false)") from e
            self.tb = SummaryWriter(check_no_links(os.path.join(run_dir, "tb"), run_dir))
        if wandb is not None:
            from lengen.train.wandb_log import WandbSink  # start-up: only train.wandb=true needs it

            self.wb = WandbSink(run_dir, **wandb)

    def write(self, step: int, **values):
        with open_for_writing(self.path, "a", root=self.run_dir) as f:
            f.write(json.dumps(dict(step=step, time=time.time(), **values)) + "\n")
        if self.tb:
            for k, v in values.items():
                if isinstance(v, (int, float)):
                    self.tb.add_scalar(k, v, step)
        if self.wb:
            self.wb.log(step, values)

    def rows(self, step: int, rows: list[dict]) -> None:
        """The final evaluation rows (a table in W&B; the files already hold them)."""
        if self.wb:
            self.wb.table(step, rows)

    def close(self, failed: bool = False):
        if self.tb:
            self.tb.close()
            self.tb = None
        if self.wb:
            self.wb.close(failed)
            self.wb = None


class StopRequest:
    """SIGINT and SIGTERM handler for the duration of training: the first Ctrl-C (or SIGTERM:
    a scheduler's time limit, ``docker stop``, ``kill``) asks the loop to stop at the next step
    boundary, where it saves a checkpoint; a second one raises KeyboardInterrupt at once.
    Installed only from the main thread (signals cannot be handled elsewhere); the previous
    handlers are restored."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, announce: bool = True):
        self.requested, self._prev, self._installed = False, {}, False
        self.announce = announce        # data-parallel ranks other than 0 stay silent

    def install(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():
            try:
                for sig in self.SIGNALS:
                    self._prev[sig] = signal.signal(sig, self._handle)
                self._installed = True
            except ValueError:
                pass
        return self

    def _handle(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True       # told even in quiet runs: the signal was heard
        if self.announce:
            what = "SIGTERM" if signum == signal.SIGTERM else "interrupt"
            print(f"\nlengen: {what} received; finishing this step and saving a checkpoint "
                  f"(Ctrl-C again to stop at once)", file=sys.stderr)

    def restore(self) -> None:
        if self._installed:
            for sig, prev in self._prev.items():
                signal.signal(sig, prev if prev is not None else signal.SIG_DFL)
            self._prev, self._installed = {}, False


class NullLog:
    """The metrics log of data-parallel ranks other than 0 (rank 0 alone writes files)."""

    def write(self, step: int, **values):
        pass

    def rows(self, step: int, rows: list[dict]) -> None:
        pass

    def close(self, failed: bool = False):
        pass


__all__ = ["MetricsLog", "NullLog", "StopRequest"]
