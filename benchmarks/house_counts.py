"""House counts of issue 29: imports made inside functions in ``lengen/`` (each import statement
once, however deeply nested) and the length of the training loop's body function.

    python benchmarks/house_counts.py [ROOT]        # ROOT: a lengen checkout (default: this one)

Upward arrows and circles between modules are `farm-studio look`'s and tests/test_layers.py's.
"""
from __future__ import annotations

import ast
import pathlib
import sys


def in_function_imports(package: pathlib.Path) -> int:
    seen = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                seen |= {(str(path), sub.lineno) for sub in ast.walk(node)
                         if isinstance(sub, (ast.Import, ast.ImportFrom))}
    return len(seen)


def function_lines(path: pathlib.Path, name: str) -> int | None:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node.end_lineno - node.lineno + 1
    return None


if __name__ == "__main__":
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parents[1])
    print(f"in-function imports in lengen/: {in_function_imports(root / 'lengen')}")
    print(f"_train_locked: {function_lines(root / 'lengen/train/loop.py', '_train_locked')} lines")
