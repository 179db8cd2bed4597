"""Tasks; see :mod:`lengen.tasks.base` for the interface."""
from lengen.tasks.base import Batch, Task
from lengen.tasks.chomsky import (BinaryAddition, BinaryMultiplication, BucketSort, ComputeSqrt,
                                  CycleNavigation, DuplicateString, EvenPairs, MissingDuplicate,
                                  ModularArithmetic, ModularArithmeticBrackets, OddsFirst,
                                  ParityCheck, ReverseString, SolveEquation, StackManipulation)
from lengen.tasks.flipflop import FlipFlop
from lengen.tasks.text import Text

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
}


def build_task(name: str, **kwargs) -> Task:
    from lengen.registry import lookup

    return lookup(TASKS, name, "task")(**kwargs)
