from lengen.eval.evaluate import evaluate, evaluate_split
from lengen.fileio import rows_to_csv

__all__ = ["evaluate", "evaluate_split", "rows_to_csv"]
