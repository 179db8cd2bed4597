"""Randomized positions (Ruoss et al. 2023, "Randomized Positional Encodings Boost Length
Generalization of Transformers"): the ``randomized`` sampler and the sorted random subsets it
draws (also drawn by the ``label`` sampler, :mod:`lengen.samplers.label`)."""
from __future__ import annotations

import torch

from lengen.samplers.base import PositionSampler


def sorted_subset(length: int, max_length: int, *, device=None, generator=None,
                  sort: bool = True) -> torch.Tensor:
    """``length`` distinct integers drawn uniformly from [0, max_length) without replacement,
    sorted ascending (``sort=False``: in random order), as float32 [T]. Draws from ``generator``
    if given, else torch's global RNG (so a resumed run that restores the RNG state redraws the
    same positions)."""
    gen_device = generator.device if generator is not None else "cpu"
    perm = torch.randperm(max_length, generator=generator, device=gen_device)[:length]
    return (perm.sort().values if sort else perm).to(device=device, dtype=torch.float32)


def row_subsets(lengths: torch.Tensor, width: int, max_length: int, *, device=None,
                generator=None, sort: bool = True, zero_first: bool = False) -> torch.Tensor:
    """One :func:`sorted_subset` per row, sized to the row: ``lengths`` [B] -> float32 [B, width]
    whose row b starts with ``lengths[b]`` distinct integers drawn uniformly from [0, max_length)
    (sorted unless ``sort=False``; ``zero_first``: 0, then ``lengths[b] - 1`` of [1, max_length))
    and repeats its last one over the padding after it (never scored, and in a causal decoder
    never attended to by a real token). Needs width <= max_length."""
    gen_device = generator.device if generator is not None else "cpu"
    B, lo = lengths.shape[0], int(bool(zero_first))
    n = lengths.to(gen_device).long().clamp(0, width)                       # [B]
    # the first k entries of a uniformly random order of [lo, L) are a uniform k-subset; float64
    # keys make ties (which would favour low indices) negligible
    keys = torch.rand(B, max_length - lo, generator=generator, device=gen_device,
                      dtype=torch.float64)
    draw = keys.argsort(1)[:, :max(width - lo, 0)] + lo                     # [B, width - lo]
    real = torch.arange(draw.shape[1], device=gen_device)[None, :] < (n - lo)[:, None]
    if sort:              # the row's draws in ascending order first, the unused tail after them
        draw = torch.where(real, draw, torch.full_like(draw, max_length)).sort(1).values
    if zero_first:
        draw = torch.cat([draw.new_zeros(B, 1), draw], 1)[:, :width]
    cols = torch.arange(width, device=gen_device)[None, :]                  # [1, width]
    last = draw.gather(1, (n - 1).clamp_min(0)[:, None])                    # [B, 1]
    pos = torch.where(cols < n[:, None], draw, last)
    return pos.to(device=device, dtype=torch.float32)


class RandomizedSampler(PositionSampler):
    """Randomized positions (Ruoss et al. 2023): a sorted random subset of [0, L).

    Training: ``T`` distinct integers drawn uniformly from ``[0, max_length)`` without
    replacement and sorted; one draw per call, i.e. per batch, shared by its sequences.
    Evaluation: ``eval_mode='randomized'`` (default, the paper and its code: a fresh draw, so test
    positions are in distribution; drawn per block of evaluation sequences from the block's own
    generator, see :mod:`lengen.eval.evaluate`) or ``'identity'`` (positions 0..T-1).
    ``T > max_length`` is an error (the paper needs L >= the longest test length; it uses 2048).
    ``sort=False`` leaves the drawn positions in random order (the paper's Table 3 ablation; the
    method itself always sorts). ``zero_first=True`` makes the first position 0 and draws the
    other T - 1 from [1, L): the distribution of the sorted random *distances* of the public
    code's randomized relative / ALiBi encodings (pair with ``posenc_kwargs.relative=rank``).

    Randomness: one draw per forward pass, shared by every layer, as the paper describes; the
    public code's attention-level encodings (relative, ALiBi, RoPE) draw anew in every layer.

    Batches of mixed lengths (``train_draw``). Ruoss et al. train each step on ONE length n and
    draw n positions, so a sequence of length n always gets a draw of n positions, in training as
    at evaluation. A right-padded batch of mixed lengths (the decoder tasks) has no single n:
    ``train_draw='batch'`` (default: "once per batch", as the paper says) draws T, the padded
    length, and a row of real length l < T takes the first l of those T positions, packed about
    T / l times closer and ending near l L / T instead of near L: a spread it never gets at
    evaluation, where its block holds one length and draws l of [0, L) (issue 27: the likely
    cause of randomized FIRE's weak short additions, ``results/addition-cpu/README.md``).
    ``train_draw='row'`` draws for every row its own l positions of [0, L), so every length is
    trained with the spread it is evaluated with (one draw per row, not per batch; for a batch
    of one length the same distribution, only not shared by the rows). It reads the rows' real
    lengths in training only (``uses_lengths_in_training``); evaluation is unchanged. Training
    without the lengths (a forward pass in train mode with no batch) takes every row as T long.
    """

    integer_positions = True            # a subset of the integers [0, L) (label: rounded)
    EVAL_MODES = ("randomized", "identity")
    TRAIN_DRAWS = ("batch", "row")

    def __init__(self, max_length: int = 2048, eval_mode: str = "randomized", sort: bool = True,
                 zero_first: bool = False, train_draw: str = "batch"):
        if max_length < 1:
            raise ValueError(f"max_length must be >= 1, got {max_length}")
        if eval_mode not in self.EVAL_MODES:
            raise ValueError(f"unknown eval_mode '{eval_mode}' for {type(self).__name__}. "
                             f"Valid: {', '.join(self.EVAL_MODES)}")
        if train_draw not in self.TRAIN_DRAWS:
            raise ValueError(f"unknown positions_kwargs.train_draw '{train_draw}' for "
                             f"{type(self).__name__}. Valid: {', '.join(self.TRAIN_DRAWS)} "
                             f"(one draw of the padded length per batch, or one draw of its own "
                             f"length per row)")
        self.max_length, self.eval_mode, self.sort = int(max_length), eval_mode, bool(sort)
        self.zero_first, self.train_draw = bool(zero_first), train_draw
        #: per-row draws ([B, T]) in training need every row's real length
        self.uses_lengths_in_training = self.per_instance = train_draw == "row"

    @property
    def random_at_eval(self) -> bool:
        return self.eval_mode == "randomized"

    def check(self, length: int) -> None:
        if length > self.max_length:
            raise ValueError(
                f"{type(self).__name__} draws positions from [0, {self.max_length}) but the input "
                f"has {length} tokens; raise model.positions_kwargs.max_length to >= {length}")

    def sample(self, length, *, training, device=None, generator=None, batch_size=None,
               lengths=None, tokens=None):
        if not training and self.eval_mode == "identity":
            return torch.arange(length, device=device, dtype=torch.float32)
        self.check(length)
        if training and self.train_draw == "row" and lengths is not None:
            return row_subsets(lengths, length, self.max_length, device=device,
                               generator=generator, sort=self.sort, zero_first=self.zero_first)
        if self.zero_first and length > 0:       # 0, then T - 1 distinct draws from [1, L)
            rest = sorted_subset(length - 1, self.max_length - 1, device=device,
                                 generator=generator, sort=self.sort) + 1
            return torch.cat([rest.new_zeros(1), rest])
        return sorted_subset(length, self.max_length, device=device, generator=generator,
                             sort=self.sort)

    def max_position(self, length):
        if self.eval_mode == "identity":     # a long eval input may exceed L with identity
            return float(max(self.max_length - 1, length - 1))
        self.check(length)
        return float(self.max_length - 1)

    def describe(self):
        order = "sorted" if self.sort else "unsorted"
        ev = (f"a fresh {order} draw" if self.eval_mode == "randomized" else "positions 0..T-1")
        per = ("each row its own length's worth, one draw per row" if self.train_draw == "row"
               else "one per batch")
        return (f"{type(self).__name__.removesuffix('Sampler').lower()}: train: {order} draw of T "
                f"distinct positions from [0, {self.max_length}), {per}; eval: {ev}")
