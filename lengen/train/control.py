"""What the training loop keeps beside the maths: the metrics log and the Ctrl-C handler."""
from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

from lengen.errors import ConfigError


class MetricsLog:
    def __init__(self, run_dir, tensorboard: bool):
        self.path = os.path.join(run_dir, "metrics.jsonl")
        self.tb = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as e:
                raise ConfigError("train.tensorboard=true needs TensorBoard: pip install "
                                  "'lengen[tensorboard]' (or set train.tensorboard=false)") from e
            self.tb = SummaryWriter(os.path.join(run_dir, "tb"))

    def write(self, step: int, **values):
        with open(self.path, "a") as f:
            f.write(json.dumps(dict(step=step, time=time.time(), **values)) + "\n")
        if self.tb:
            for k, v in values.items():
                if isinstance(v, (int, float)):
                    self.tb.add_scalar(k, v, step)

    def close(self):
        if self.tb:
            self.tb.close()


class StopRequest:
    """SIGINT handler for the duration of training: the first Ctrl-C asks the loop to stop at the
    next step boundary, a second one raises KeyboardInterrupt at once. Installed only from the
    main thread (signals cannot be handled elsewhere); the previous handler is restored."""

    def __init__(self, announce: bool = True):
        self.requested, self._prev, self._installed = False, None, False
        self.announce = announce        # data-parallel ranks other than 0 stay silent

    def install(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():
            try:
                self._prev = signal.signal(signal.SIGINT, self._handle)
                self._installed = True
            except ValueError:
                pass
        return self

    def _handle(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True       # told even in quiet runs: the Ctrl-C was heard
        if self.announce:
            print("\nlengen: interrupt received; finishing this step and saving a checkpoint "
                  "(Ctrl-C again to stop at once)", file=sys.stderr)

    def restore(self) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._prev if self._prev is not None else signal.SIG_DFL)
            self._installed = False


class NullLog:
    """The metrics log of data-parallel ranks other than 0 (rank 0 alone writes files)."""

    def write(self, step: int, **values):
        pass

    def close(self):
        pass


__all__ = ["MetricsLog", "NullLog", "StopRequest"]
