from lengen.train.loop import TrainingDiverged, load_run, train

__all__ = ["train", "load_run", "TrainingDiverged"]
