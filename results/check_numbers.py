"""Thin entry point: the number check lives in lengen/analysis/numbers.py (its docstring has the
rules). ``python results/check_numbers.py [FILE ...]`` or ``--baseline``."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from lengen.analysis.numbers import *  # noqa: E402,F401,F403
from lengen.analysis.numbers import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
