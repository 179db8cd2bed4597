"""Split names shared by every length-generalization task: ``len=K``.

A length split names the test length ``K`` of a task: the input length of a Chomsky task, the
number of items (symbols, digits, list entries) of a decoder sequence task. Any ``K >= 1`` is a
valid split of such a task, whether or not it is one of the task's default splits.

    split_name(12)            # 'len=12'
    parse_split("len=12")     # 12
    length_splits([2, 3])     # ['len=2', 'len=3']
"""
from __future__ import annotations

import re
from typing import Iterable

_SPLIT = re.compile(r"^len=(\d+)$")


def split_name(length: int) -> str:
    """``12`` -> ``'len=12'``."""
    return f"len={length}"


def is_length_split(split) -> bool:
    """True for ``'len=K'`` with an integer ``K >= 1``."""
    m = _SPLIT.match(str(split).strip())
    return m is not None and int(m.group(1)) >= 1


def parse_split(split, *, what: str = "Chomsky tasks", unit: str = "the input length") -> int:
    """``"len=K"`` -> ``K`` (a positive int); anything else is a ValueError that says which form
    is expected (``what`` names the tasks, ``unit`` what K counts)."""
    if not is_length_split(split):
        raise ValueError(f"bad split '{split}': {what} take splits of the form 'len=K' "
                         f"with an integer K >= 1 ({unit}), e.g. 'len=100'")
    return int(_SPLIT.match(str(split).strip()).group(1))


def length_splits(lengths: Iterable[int]) -> list[str]:
    """``[41, 42]`` -> ``['len=41', 'len=42']``."""
    return [split_name(int(n)) for n in lengths]


__all__ = ["split_name", "parse_split", "is_length_split", "length_splits"]
