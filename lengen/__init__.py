"""lengen: length generalization in transformers.

Quick start::

    import lengen
    cfg = lengen.resolve({"model": {"attention": "tra", "d_model": 64, "n_layers": 2},
                          "train": {"steps": 200}})
    model, task, rows = lengen.train(cfg, "runs/tra")

See the README for the CLI (``lengen train / eval / demo``) and ``docs/architecture.md`` for the map.
"""
# first, before anything imports torch: the OpenMP runtime reads OMP_WAIT_POLICY once, when torch
# loads it; PASSIVE unless the user set it (why: lengen/threads.py, benchmarks/threads.py)
from lengen.threads import set_wait_policy

set_wait_policy()

from lengen.startup import ctrl_c_at_startup  # noqa: E402 - imports nothing heavy

with ctrl_c_at_startup():        # a Ctrl-C inside `import torch`: one line in the lengen command
    from lengen.attention import ATTENTIONS  # noqa: E402 - after the wait policy on purpose
    from lengen.config import ExperimentConfig, resolve
    from lengen.eval import evaluate
    from lengen.model import ModelConfig, Transformer
    from lengen.posenc import POSENCS
    from lengen.samplers import SAMPLERS
    from lengen.tasks import TASKS, build_task
    from lengen.train import load_run, train

__version__ = "0.1.0"

__all__ = ["ATTENTIONS", "POSENCS", "SAMPLERS", "TASKS", "ExperimentConfig", "ModelConfig",
           "Transformer", "build_task", "evaluate", "load_run", "resolve", "train"]
