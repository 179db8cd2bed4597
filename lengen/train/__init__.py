from lengen.train.loop import TrainingDiverged, evaluate_run, load_run, train

__all__ = ["train", "load_run", "evaluate_run", "TrainingDiverged"]
