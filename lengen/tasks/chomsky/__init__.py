"""The 15 Chomsky-hierarchy tasks of Deletang et al. 2023 / Ruoss et al. 2023 as encoder tasks.

See :mod:`lengen.tasks.chomsky.base` for the shared protocol (placeholders, masks, token layout,
``len=K`` splits) and each task module for its definition, examples and vocabulary.
"""
from lengen.tasks.chomsky.base import ChomskyTask, parse_split, split_name
from lengen.tasks.chomsky.cs.binary_addition import BinaryAddition
from lengen.tasks.chomsky.cs.binary_multiplication import BinaryMultiplication
from lengen.tasks.chomsky.cs.bucket_sort import BucketSort
from lengen.tasks.chomsky.cs.compute_sqrt import ComputeSqrt
from lengen.tasks.chomsky.cs.duplicate_string import DuplicateString
from lengen.tasks.chomsky.cs.missing_duplicate import MissingDuplicate
from lengen.tasks.chomsky.cs.odds_first import OddsFirst
from lengen.tasks.chomsky.dcf.modular_arithmetic_brackets import ModularArithmeticBrackets
from lengen.tasks.chomsky.dcf.reverse_string import ReverseString
from lengen.tasks.chomsky.dcf.solve_equation import SolveEquation
from lengen.tasks.chomsky.dcf.stack_manipulation import StackManipulation
from lengen.tasks.chomsky.regular.cycle_navigation import CycleNavigation
from lengen.tasks.chomsky.regular.even_pairs import EvenPairs
from lengen.tasks.chomsky.regular.modular_arithmetic import ModularArithmetic
from lengen.tasks.chomsky.regular.parity_check import ParityCheck

#: in the papers' table order: regular, deterministic context-free, context-sensitive
CHOMSKY_TASKS = (EvenPairs, ModularArithmetic, ParityCheck, CycleNavigation,
                 StackManipulation, ReverseString, ModularArithmeticBrackets, SolveEquation,
                 DuplicateString, MissingDuplicate, OddsFirst, BinaryAddition,
                 BinaryMultiplication, ComputeSqrt, BucketSort)

__all__ = ["CHOMSKY_TASKS", "ChomskyTask", "parse_split", "split_name"] + [
    t.__name__ for t in CHOMSKY_TASKS]
