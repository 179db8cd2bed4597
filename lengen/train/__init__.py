from lengen.train.loop import TrainingDiverged, load_run, train
from lengen.train.runs import evaluate_run, reevaluate

__all__ = ["train", "load_run", "evaluate_run", "reevaluate", "TrainingDiverged"]
