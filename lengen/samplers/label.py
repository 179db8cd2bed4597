"""Label positional encodings (Li & McClelland 2022): the ``label`` sampler, randomized positions
with their own evaluation modes."""
from __future__ import annotations

import torch

from lengen.samplers.randomized import RandomizedSampler


class LabelSampler(RandomizedSampler):
    """Label positional encodings (Li & McClelland 2022): the same sorted random labels from
    [0, L) as :class:`RandomizedSampler` at training time (with the ``learned`` scheme this is the
    TRA paper's "Label" baseline).

    Evaluation (our choice, stated because the papers differ in emphasis): ``eval_mode=
    'randomized'`` (default) draws fresh labels exactly as in training, as Ruoss et al.'s code does
    at test time, so every label the model sees is in distribution. ``'spread'`` uses the
    deterministic, evenly spaced labels ``floor(k (L-1) / (T-1) + 1/2)`` (the typical spacing of
    a draw, without evaluation noise). ``'identity'`` uses 0..T-1.
    """

    EVAL_MODES = ("randomized", "spread", "identity")

    def sample(self, length, *, training, device=None, generator=None, batch_size=None,
               lengths=None, tokens=None):
        if not training and self.eval_mode == "spread":
            self.check(length)
            span = torch.linspace(0, self.max_length - 1, length, dtype=torch.float64,
                                  device=device)
            return (span + 0.5).floor().to(torch.float32)   # round half up: strictly increasing
        return super().sample(length, training=training, device=device, generator=generator,
                              batch_size=batch_size, lengths=lengths)

    def describe(self):
        if self.eval_mode == "spread":
            return (f"label: train: sorted draw of T distinct labels from [0, {self.max_length}), "
                    f"one per batch; eval: evenly spaced labels over [0, {self.max_length - 1}]")
        return super().describe()
