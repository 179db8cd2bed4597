"""Contracts every task keeps (in the spirit of the ``GeneralizationTask`` interface of the
Chomsky-hierarchy benchmark): batches are a function of the generator, splits and lengths are as
the task declares them, masks score only real answer tokens, and a decoder task's answers are
what its own solver says. Run by ``tests/test_contracts.py`` on every registered task and by
``lengen check`` on any task, built-in or plugin.

* ``deterministic``: the same generator seed gives the same training batch and the same
  evaluation sequences; another seed gives other ones.
* ``splits``: every default split is accepted by ``check_split`` and makes a batch of the asked
  size whose width is at most ``max_input_length``; a name that is not a split is refused.
* ``masks``: ``inputs``, ``targets`` and both masks share one shape; every row scores at least
  one position; scored targets are valid ids; a sequence task scores exactly the answer and its
  EOS (never a pad, never a prompt token).
* ``answers``: a sequence task's scored targets are its ``solve`` of the prompt's items, then
  EOS; a decoder's targets are its next input tokens wherever the next input is a real token.
"""
from __future__ import annotations

import torch

from lengen.contracts.model import Failure, Skip
from lengen.tasks.sequence.base import EOS, PAD, SEP, SequenceTask, prompts_and_answers


def _splits(task) -> list[str]:
    splits = list(task.splits())
    if not splits:
        raise Failure("splits() is empty: a task needs at least one evaluation split")
    return splits[:2] + splits[-1:] if len(splits) > 3 else splits


def deterministic(task) -> None:
    def train(seed):
        return task.train_batch(8, torch.Generator().manual_seed(seed))

    a, b, c = train(0), train(0), train(1)
    for f in ("inputs", "targets", "loss_mask", "eval_mask"):
        if not torch.equal(getattr(a, f), getattr(b, f)):
            raise Failure(f"two training batches from the same seed differ in {f}")
    if a.inputs.shape == c.inputs.shape and torch.equal(a.inputs, c.inputs):
        raise Failure("training batches from seeds 0 and 1 are identical")
    split = _splits(task)[0]
    one = [x.inputs for x in task.eval_batches(split, 10, 4, seed=3)]
    two = [x.inputs for x in task.eval_batches(split, 10, 10, seed=3)]
    if not torch.equal(torch.cat([r for x in one for r in x.unbind(0)]).flatten(),
                       torch.cat([r for x in two for r in x.unbind(0)]).flatten()):
        raise Failure(f"evaluation sequences of '{split}' depend on the batch size")


def splits(task) -> None:
    for split in _splits(task):
        try:
            task.check_split(split)
        except ValueError as e:
            raise Failure(f"check_split refuses its own default split '{split}': {e}") from None
        batch = task.eval_batch(split, 5, torch.Generator().manual_seed(0))
        if len(batch) != 5:
            raise Failure(f"eval_batch('{split}', 5) made {len(batch)} rows")
        longest = task.max_input_length([split])
        if batch.inputs.shape[1] > longest:
            raise Failure(f"'{split}' inputs are {batch.inputs.shape[1]} tokens but "
                          f"max_input_length says {longest}")
    try:
        task.check_split("no-such-split")
    except ValueError:
        return
    raise Failure("check_split accepts 'no-such-split'")


def masks(task) -> None:
    batches = [task.train_batch(6, torch.Generator().manual_seed(0))]
    batches += [task.eval_batch(s, 6, torch.Generator().manual_seed(1)) for s in _splits(task)]
    V = task.vocab_size
    for b in batches:
        shapes = {tuple(getattr(b, f).shape) for f in ("inputs", "targets", "loss_mask",
                                                         "eval_mask")}
        if len(shapes) != 1:
            raise Failure(f"inputs, targets and masks differ in shape: {sorted(shapes)}")
        if b.loss_mask.dtype != torch.bool or b.eval_mask.dtype != torch.bool:
            raise Failure("masks must be bool tensors")
        if not b.eval_mask.any(1).all():
            raise Failure("a row has no scored position (its accuracy would be undefined)")
        for name, mask in (("loss", b.loss_mask), ("eval", b.eval_mask)):
            t = b.targets[mask]
            if t.numel() and (t.min() < 0 or t.max() >= V):
                raise Failure(f"{name}-masked targets outside the vocabulary [0, {V})")
        if b.inputs.min() < 0 or b.inputs.max() >= V:
            raise Failure(f"input ids outside the vocabulary [0, {V})")
        if isinstance(task, SequenceTask):
            if getattr(task, "loss_on", "answer") == "answer":
                if not torch.equal(b.loss_mask, b.eval_mask):
                    raise Failure("a sequence task trains on exactly what it scores")
            elif (b.eval_mask & ~b.loss_mask).any() or (b.loss_mask & (b.targets == PAD)).any():
                raise Failure("loss_on='all' must train on every scored target and no padding")
            ends = (b.targets == EOS) & b.eval_mask
            if not (ends.sum(1) == 1).all():
                raise Failure("each row must score exactly one EOS target")
            after = ends.long().cumsum(1) - ends.long() > 0
            if (after & b.eval_mask).any():
                raise Failure("a position after the EOS target is scored")


def answers(task) -> None:
    checked = False
    # the standard layout [WORD] items [SEP]: the answer is solve(items); a task that makes its
    # own prompts (addition) is checked against its solver by its own tests
    if isinstance(task, SequenceTask) and type(task).sample is SequenceTask.sample:
        for split in _splits(task)[:2]:
            batch = task.eval_batch(split, 6, torch.Generator().manual_seed(2))
            for prompt, answer in zip(*prompts_and_answers(batch)):
                if int(prompt[-1]) != SEP:
                    raise Failure(f"a prompt does not end in [SEP]: {task.decode(prompt)}")
                items = prompt[1:-1] - task.first_symbol
                want = task.solve(items[None])[0] + task.first_symbol
                got = answer[:-1]
                if int(answer[-1]) != EOS or got.tolist() != want.tolist():
                    raise Failure(f"'{split}': answer '{task.decode(answer)}' is not the "
                                  f"solver's '{task.decode(want)}' + <eos> for prompt "
                                  f"'{task.decode(prompt)}'")
        checked = True
    if getattr(task, "causal", False):
        b = task.train_batch(6, torch.Generator().manual_seed(4))
        nxt = b.inputs[:, 1:]                                         # [B, T-1]
        scored = b.loss_mask[:, :-1] & (nxt != 0)
        if not torch.equal(b.targets[:, :-1][scored], nxt[scored]):
            raise Failure("a decoder's target at t is not its input token at t + 1")
        checked = True
    if not checked:
        raise Skip("no solver to compare with (an encoder task, or prompts of its own layout)")


#: contract name -> function(task)
TASK_CONTRACTS = {
    "deterministic": deterministic,
    "splits": splits,
    "masks": masks,
    "answers": answers,
}
