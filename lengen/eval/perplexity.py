"""Perplexity vs evaluation length -> rows.

For each split ``len=K`` of a text task (:mod:`lengen.tasks.text`, which defines the windows and
which targets each window scores: non-overlapping by default, or a sliding window), the mean
negative log-likelihood over the scored targets, pooled over windows, and its exponential::

    {split: 'len=K', length: K, metric: 'nll' | 'ppl', value, tokens, sequences,
     corpus, tokenizer, eval_split, protocol, stride, train_length, <run meta>}

``tokens`` is the number of scored targets and ``sequences`` the number of windows. Positions come
from the model's sampler exactly as in every other evaluation (:func:`lengen.eval.evaluate.
eval_stream`): a sampler that draws at evaluation (randomized positions, label encodings) draws
once per block of ``EVAL_BLOCK`` windows from a generator seeded by (``seed``, split, block), never
from torch's global RNG, so the numbers do not depend on the batch size and evaluating never moves
any other random stream; a batch-aware sampler (interpolation per evaluation length, warping) gets
the windows' lengths. Rows carry the
same run columns as every other evaluation row (``meta``), so they go through
:mod:`lengen.analysis.tables` and the sweep unchanged; ``lengen.eval.evaluate`` routes text tasks
here, so ``lengen train`` / ``lengen eval`` write them.

Memory: the model runs in eval mode, where every attention kind takes its query-blocked lean path
(memory linear in ``K``); the output head is applied to the final hidden states of the *scored*
positions only, a block of rows at a time (at most ``2^22`` logits, 16 MB, per block: small
enough for the allocator to reuse the block instead of mapping fresh pages each time; memory
measured in benchmarks/RESULTS.md, "Perplexity-evaluation memory"), so the ``[B, K, V]`` logits
tensor (823 MB for one
4096-token window of GPT-2's 50,257 ids) is never built. :func:`reference_nll` scores the same
batch from the model's full logits (the slow reference the blocked path is tested against).
"""
from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from lengen.eval.stream import eval_stream, forward

LOGITS_PER_BLOCK = 1 << 22


def _at_least_fp32(x: torch.Tensor) -> torch.Tensor:
    """Half-precision logits are scored in fp32; fp32 and fp64 stay as they are."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


@contextlib.contextmanager
def hidden_states(model):
    """Within the block, ``model(tokens)`` returns the final (normed) hidden states ``[B, T, D]``
    instead of logits; yields the output head, to be applied by the caller. A model whose head
    is not its ``head`` attribute (a Hugging Face backbone) swaps it with ``replace_head``."""
    swap = getattr(model, "replace_head", None)
    if swap is None:
        def swap(new):
            old, model.head = model.head, new
            return old
    head = swap(nn.Identity())
    try:
        yield head
    finally:
        swap(head)


def eval_logits_at_once(task, vocab_size: int,
                        logits_per_block: int = LOGITS_PER_BLOCK) -> int | None:
    """The most logits evaluating ``task`` holds at once (for the memory pre-check,
    :func:`lengen.model.memory.check_fits`): a perplexity task's block of ``rows x vocab``
    logits and the log-probabilities ``cross_entropy`` makes of it (:func:`score_batch`); None
    for the other tasks, whose evaluation takes the full logits."""
    if getattr(task, "evaluation", "accuracy") != "perplexity":
        return None
    rows = max(1, logits_per_block // int(vocab_size))
    return 2 * rows * int(vocab_size)


@torch.inference_mode()
def score_batch(model, batch, *, positions: torch.Tensor | None = None,
                logits_per_block: int = LOGITS_PER_BLOCK) -> dict:
    """Sum of the NLL (nats) of the targets under ``batch.eval_mask``, and their count, computing
    logits only for those targets, a block of rows at a time. ``positions`` ([T] or [B, T]):
    explicit positions (default: the model's sampler)."""
    with hidden_states(model) as head:
        h = forward(model, batch.inputs, positions)               # [B, T, D]
    mask = batch.eval_mask
    h, targets = h[mask], batch.targets[mask]                     # [N, D], [N]
    rows = max(1, logits_per_block // head.out_features)
    nll = torch.zeros((), dtype=torch.float64, device=h.device)
    for s in range(0, h.shape[0], rows):
        logits = _at_least_fp32(head(h[s:s + rows]))               # [rows, V]
        nll += F.cross_entropy(logits, targets[s:s + rows], reduction="sum").double()
    return {"nll_sum": float(nll), "tokens": int(targets.numel())}


@torch.inference_mode()
def reference_nll(model, batch, *, positions: torch.Tensor | None = None) -> dict:
    """The same sums from the full ``[B, T, V]`` logits (reference for :func:`score_batch`)."""
    logits = _at_least_fp32(forward(model, batch.inputs, positions))   # [B, T, V]
    nll = F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), reduction="none")
    mask = batch.eval_mask.flatten()
    return {"nll_sum": float(nll[mask].double().sum()), "tokens": int(mask.sum())}


@torch.inference_mode()
def perplexity_split(model, task, split: str, *, n_sequences: int | None = None,
                     batch_size: int = 64, seed: int = 1234, device="cpu") -> dict:
    """``{nll, ppl, tokens, sequences, length}`` of one ``len=K`` split. ``seed`` seeds the
    evaluation positions of samplers that draw at evaluation (module docstring)."""
    was_training = model.training
    model.eval()
    nll_sum, tokens, windows = 0.0, 0, 0
    try:
        for _, batch, pos in eval_stream(model, task, split, n_sequences, batch_size, seed,
                                         device):
            s = score_batch(model, batch, positions=pos)
            nll_sum, tokens = nll_sum + s["nll_sum"], tokens + s["tokens"]
            windows += batch.inputs.shape[0]
    finally:
        model.train(was_training)
    nll = nll_sum / max(tokens, 1)
    ppl = math.exp(nll) if nll < 700 else math.inf            # exp overflows a float past ~709
    return {"nll": nll, "ppl": ppl, "tokens": tokens, "sequences": windows,
            "length": task.length_of(split)}


def evaluate_perplexity(model, task, splits=None, *, n_sequences: int | None = None,
                        batch_size: int = 64, seed: int | None = None, device="cpu",
                        meta: dict | None = None, progress: bool = False) -> list[dict]:
    """Rows ``nll`` and ``ppl`` per split (default: the task's lengths). Text windows are read in
    corpus order whatever ``seed`` is; it only seeds the evaluation positions of samplers that
    draw at evaluation (default 1234, ``eval.seed``'s default)."""
    seed = 1234 if seed is None else seed
    splits = list(task.splits() if splits is None else splits)
    for split in splits:
        task.check_split(split)
    model.check_length(task.max_input_length(splits))
    info = task.eval_info() if hasattr(task, "eval_info") else {}
    it = splits
    if progress:
        it = tqdm(splits, desc="perplexity", leave=False)
    rows = []
    for split in it:
        r = perplexity_split(model, task, split, n_sequences=n_sequences, batch_size=batch_size,
                             seed=seed, device=device)
        base = dict(meta or {}, split=split, length=r["length"], sequences=r["sequences"],
                    tokens=r["tokens"], **info)
        rows.append(dict(base, metric="ppl", value=r["ppl"]))
        rows.append(dict(base, metric="nll", value=r["nll"]))
    return rows


__all__ = ["evaluate_perplexity", "perplexity_split", "score_batch", "reference_nll",
           "hidden_states"]
