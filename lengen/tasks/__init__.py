"""Tasks; see :mod:`lengen.tasks.base` for the interface."""
from lengen.tasks.base import Batch, Task
from lengen.tasks.chomsky import (BinaryAddition, BinaryMultiplication, BucketSort, ComputeSqrt,
                                  CycleNavigation, DuplicateString, EvenPairs, MissingDuplicate,
                                  ModularArithmetic, ModularArithmeticBrackets, OddsFirst,
                                  ParityCheck, ReverseString, SolveEquation, StackManipulation)
from lengen.tasks.flipflop import FlipFlop
from lengen.tasks.sequence import Addition, Copy, Reverse, Sort, Summation
from lengen.tasks.text import Text
from lengen.registry import ExtensionPoint, check_kwargs, construct, constructor_params

# Literal registry: the CLI name is the key.
TASKS: dict[str, type[Task]] = {
    "flipflop": FlipFlop,
    # language modelling on real text (decoder; perplexity per evaluation length)
    "text": Text,
    # Chomsky hierarchy (Deletang et al. 2023; Ruoss et al. 2023): encoder tasks
    "even_pairs": EvenPairs,
    "modular_arithmetic": ModularArithmetic,
    "parity_check": ParityCheck,
    "cycle_navigation": CycleNavigation,
    "stack_manipulation": StackManipulation,
    "reverse_string": ReverseString,
    "modular_arithmetic_brackets": ModularArithmeticBrackets,
    "solve_equation": SolveEquation,
    "duplicate_string": DuplicateString,
    "missing_duplicate_string": MissingDuplicate,
    "odds_first": OddsFirst,
    "binary_addition": BinaryAddition,
    "binary_multiplication": BinaryMultiplication,
    "compute_sqrt": ComputeSqrt,
    "bucket_sort": BucketSort,
    # Kazemnejad et al. 2023 / index-warping paper: decoder prompt -> answer tasks
    "copy": Copy,
    "reverse": Reverse,
    "sort": Sort,
    "summation": Summation,
    # decimal addition (Zhou et al. 2024): reversed format, index hints, random spaces
    "addition": Addition,
}


#: built-ins, import paths (``mypkg.tasks:Mine``) and installed plugins (entry points)
TASK_POINT = ExtensionPoint("task", "task.name", "lengen.tasks", TASKS, Task)


def task_kwargs(cls: type[Task]) -> list[str]:
    """Keyword arguments a task class accepts (its ``__init__`` and, through ``**kwargs``, its
    bases')."""
    return list(constructor_params(cls))


def build_task(name: str, **kwargs) -> Task:
    """``TASKS[name](**kwargs)`` (or a plugin task), checked as a config's ``task.name`` /
    ``task.kwargs`` are: an unknown name or keyword, or a bad value, is a ConfigError (a
    ValueError) naming the key and listing the valid ones."""
    cls = TASK_POINT.get(name, "task.name")
    kwargs = check_kwargs(cls, kwargs, section="task.kwargs", kind="task", name=name)
    return construct(cls, kwargs, what=f"task '{name}' (task.kwargs={kwargs})")
