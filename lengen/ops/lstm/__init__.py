from lengen.ops.lstm.naive import lstm_naive

__all__ = ["lstm_naive"]
