"""Tasks; see :mod:`lengen.tasks.base` for the interface."""
from lengen.tasks.base import Batch, Task
from lengen.tasks.flipflop import FlipFlop

# Literal registry: the CLI name is the key.
TASKS: dict[str, type[Task]] = {
    "flipflop": FlipFlop,
}


def build_task(name: str, **kwargs) -> Task:
    from lengen.registry import lookup

    return lookup(TASKS, name, "task")(**kwargs)
