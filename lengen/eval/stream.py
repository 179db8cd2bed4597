"""The evaluation stream: the fixed evaluation sequences of a split, batch by batch, with the
positions the model is evaluated at (:func:`eval_stream`), and the forward call that passes them
(:func:`forward`). Shared by the accuracy metrics (:mod:`.evaluate`), the perplexity protocol
(:mod:`.perplexity`) and greedy generation."""
from __future__ import annotations

import torch

from lengen.errors import ConfigError
from lengen.tasks.base import EVAL_BLOCK, block_seed


def block_positions(model, split: str, seed: int, block: int, length: int, device=None):
    """Evaluation positions of block ``block`` of ``split`` (model in eval mode): ``[T]``, or
    ``[EVAL_BLOCK, T]`` from a per-sequence sampler."""
    gen = torch.Generator().manual_seed(block_seed(seed, split, block, "positions"))
    return model.sample_positions(length, batch_size=EVAL_BLOCK, device=device, generator=gen)


def eval_stream(model, task, split: str, n_sequences: int, batch_size: int, seed: int,
                device="cpu"):
    """Yield ``(index of the first sequence, batch on device, positions or None)`` over the
    evaluation set of ``split``. With a sampler that draws at evaluation, batches are cut at
    block boundaries so each piece gets its block's positions; a batch-aware sampler
    (``uses_batch``: interpolation per length, warping, token-structured positions), which is
    deterministic at evaluation, computes each batch's positions from its rows; otherwise
    positions are None (the model's deterministic default). Call with the model in eval mode."""
    sampler = getattr(model, "sampler", None)
    aware = sampler is not None and getattr(sampler, "uses_batch", False)
    if aware and getattr(sampler, "random_at_eval", True):
        raise ValueError(f"{type(sampler).__name__} reads the batch and draws at evaluation; a "
                         f"batch-aware sampler must be deterministic at evaluation "
                         f"(random_at_eval = False), or its numbers would depend on the batch size")
    random = sampler is not None and getattr(sampler, "random_at_eval", True)
    start, cached, probed = 0, (None, None), set()
    for batch in task.eval_batches(split, n_sequences, batch_size, seed):
        batch = batch.to(device)
        n, T = batch.inputs.shape
        if aware:
            yield start, batch, finite_positions(
                model.sample_positions(T, batch_size=n, device=device, batch=batch), sampler, T)
            start += n
            continue
        i = 0
        while i < n:
            if not random:
                if sampler is not None and T not in probed:    # the model's own default
                    finite_positions(model.sample_positions(T, device=device), sampler, T)
                    probed.add(T)
                yield start, batch, None
                break
            block, offset = divmod(start + i, EVAL_BLOCK)
            stop = min(n, i + EVAL_BLOCK - offset)
            if cached[0] != (block, T):
                cached = ((block, T), finite_positions(
                    block_positions(model, split, seed, block, T, device), sampler, T))
            pos = cached[1]
            if pos.dim() == 2:                       # per-sequence positions: this piece's rows
                pos = pos[offset:offset + stop - i]
            yield start + i, batch.rows(i, stop), pos
            i = stop
        start += n


def finite_positions(pos, sampler, length: int):
    """``pos`` when every position is a finite number; else ConfigError naming the sampler (a
    position of inf or NaN makes every score NaN: rows of NaN and exit 0, a silent result)."""
    if torch.is_tensor(pos) and pos.is_floating_point() and not bool(torch.isfinite(pos).all()):
        bad = pos[~torch.isfinite(pos)].flatten()[0].item()
        name = getattr(sampler, "name", None) or type(sampler).__name__
        raise ConfigError(f"position sampler {name!r} gave non-finite evaluation positions "
                          f"({bad} among {length} positions); positions must be finite numbers. "
                          f"Check the sampler's kwargs (model.positions_kwargs) or its code")
    return pos


def forward(model, inputs, positions):
    """``model(inputs)``, passing ``positions`` only when there are some (plain modules work)."""
    return model(inputs) if positions is None else model(inputs, positions=positions)


__all__ = ["finite_positions", "block_positions", "eval_stream", "forward"]
