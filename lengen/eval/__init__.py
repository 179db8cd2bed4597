from lengen.eval.evaluate import evaluate, evaluate_split, rows_to_csv

__all__ = ["evaluate", "evaluate_split", "rows_to_csv"]
