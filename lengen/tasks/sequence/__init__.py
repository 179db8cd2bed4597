"""Decoder sequence tasks: prompt -> answer + EOS (copy, reverse, sort, summation of Kazemnejad et
al. 2023 as used by the index-warping paper; decimal addition of Zhou et al. 2024). See
:mod:`lengen.tasks.sequence.base` for the shared layout (vocabulary, padding, masks, ``len=K``
splits, streamed or fixed training data) and each task module for its definition, examples and
how its tokens map to the paper's text. A new task is registered in :data:`lengen.tasks.TASKS`
only: nothing here lists the tasks."""
from lengen.tasks.sequence.base import (EOS, PAD, SEP, SequenceTask, batch_from_sequences,
                                        prompts_and_answers)
from lengen.tasks.sequence.addition import Addition
from lengen.tasks.sequence.copy import Copy
from lengen.tasks.sequence.reverse import Reverse
from lengen.tasks.sequence.sort import Sort
from lengen.tasks.sequence.summation import Summation

__all__ = ["EOS", "PAD", "SEP", "SequenceTask", "batch_from_sequences",
           "prompts_and_answers", "Copy", "Reverse", "Sort", "Summation", "Addition"]
