"""Flip-flop task: generated sequences checked by an independent brute-force solver, instruction
frequencies per split, seed determinism, supervision masks and eval batch sizes."""
from __future__ import annotations

import math

import pytest
import torch

from lengen.tasks.flipflop import FlipFlop, generate_flipflop

# token ids of the official data set card, written out here rather than imported
W_, R_, I_, ZERO_, ONE_ = 0, 1, 2, 3, 4
PAPER_P_IGNORE = {"iid": 0.8, "sparse": 0.98, "dense": 0.1}


def check_sequence(seq) -> list[int | None]:
    """Brute-force validity check of one token sequence; returns, for every position t, the token
    that position t+1 must hold when it is determined (the bit after a read), else None."""
    seq = [int(x) for x in seq]
    assert len(seq) % 2 == 0 and len(seq) >= 4
    instrs, bits = seq[0::2], seq[1::2]
    assert all(c in (W_, R_, I_) for c in instrs), "instruction slot holds a non-instruction"
    assert all(c in (ZERO_, ONE_) for c in bits), "bit slot holds a non-bit"
    assert instrs[0] == W_, "first instruction is not w"
    assert instrs[-1] == R_, "last instruction is not r"
    expected: list[int | None] = [None] * len(seq)
    memory = None
    for p in range(len(instrs)):
        ins, bit = instrs[p], bits[p]
        if ins == W_:
            memory = bit
        elif ins == R_:
            assert bit == memory, f"read at pair {p} returns {bit}, memory holds {memory}"
            expected[2 * p] = memory
    return expected


def full_sequences(batch):
    """Recover the generated [B, 2n] sequences from a next-token batch."""
    torch.testing.assert_close(batch.inputs[:, 1:], batch.targets[:, :-1], rtol=0, atol=0)
    return torch.cat([batch.inputs, batch.targets[:, -1:]], dim=1)


def test_checker_rejects_broken_sequences():
    good = [W_, ONE_, I_, ZERO_, R_, ONE_]
    check_sequence(good)
    for bad in ([R_, ONE_, I_, ZERO_, R_, ONE_],       # first not w
                [W_, ONE_, R_, ONE_, I_, ZERO_],       # last not r
                [W_, ONE_, I_, ZERO_, R_, ZERO_],      # wrong read
                [W_, ONE_, ZERO_, I_, R_, ONE_]):      # broken alternation
        with pytest.raises(AssertionError):
            check_sequence(bad)


@pytest.mark.parametrize("p_ignore", [0.0, 0.1, 0.8, 0.98, 1.0])
def test_generated_sequences_are_valid(p_ignore, gen):
    seqs = generate_flipflop(64, 20, p_ignore, gen)
    assert seqs.shape == (64, 40) and seqs.dtype == torch.long
    for s in seqs:
        check_sequence(s)


def test_train_batch_targets_and_masks_match_solver(gen):
    task = FlipFlop(n_pairs=32)
    batch = task.train_batch(16, gen)
    assert batch.inputs.shape == batch.targets.shape == (16, 63)
    seqs = full_sequences(batch)
    for b, s in enumerate(seqs):
        expected = check_sequence(s)
        want_mask = torch.tensor([e is not None for e in expected[:-1]])
        assert torch.equal(batch.loss_mask[b], want_mask)
        assert torch.equal(batch.eval_mask[b], want_mask)
        # the mask sits exactly on the 'r' tokens, and their targets are the remembered bits
        assert torch.equal(want_mask, batch.inputs[b] == R_)
        for t in want_mask.nonzero().flatten().tolist():
            assert int(batch.targets[b, t]) == expected[t]
    assert batch.loss_mask.any(1).all()      # every sequence has at least its final read


@pytest.mark.parametrize("split", list(PAPER_P_IGNORE))
def test_instruction_frequencies_per_split(split, gen):
    B, n = 200, 128
    task = FlipFlop(n_pairs=n)
    seqs = full_sequences(task.eval_batch(split, B, gen))
    for s in seqs[:8]:
        check_sequence(s)
    interior = seqs[:, 2:-2:2]                   # instructions except the fixed first and last
    N = interior.numel()
    p_i = PAPER_P_IGNORE[split]
    for tok, p in ((I_, p_i), (W_, (1 - p_i) / 2), (R_, (1 - p_i) / 2)):
        freq = (interior == tok).double().mean().item()
        tol = 5 * math.sqrt(p * (1 - p) / N) + 1e-3          # 5 sigma
        assert abs(freq - p) < tol, (split, tok, freq, p)
    # bits after w and i are fair coins
    bits = seqs[:, 1::2][seqs[:, 0::2] != R_]
    assert abs((bits == ONE_).double().mean().item() - 0.5) < 0.02


def test_training_uses_p_ignore(gen):
    task = FlipFlop(n_pairs=128, p_ignore=0.5)
    seqs = full_sequences(task.train_batch(200, gen))
    assert abs((seqs[:, 2:-2:2] == I_).double().mean().item() - 0.5) < 0.02


def test_same_seed_same_batches_different_seed_different():
    task = FlipFlop(n_pairs=64)

    def draw(seed):
        g = torch.Generator().manual_seed(seed)
        return [task.train_batch(8, g), task.eval_batch("sparse", 8, g), task.eval_batch("dense", 8, g)]

    a, b, c = draw(7), draw(7), draw(8)
    for x, y, z in zip(a, b, c):
        for field in ("inputs", "targets", "loss_mask", "eval_mask"):
            assert torch.equal(getattr(x, field), getattr(y, field))
        assert not torch.equal(x.inputs, z.inputs)
    # consecutive draws from one generator differ too
    g = torch.Generator().manual_seed(7)
    assert not torch.equal(task.train_batch(8, g).inputs, task.train_batch(8, g).inputs)


@pytest.mark.parametrize("n,bs,sizes", [(10, 4, [4, 4, 2]), (8, 4, [4, 4]), (3, 5, [3])])
def test_eval_batches_total(n, bs, sizes, gen):
    task = FlipFlop(n_pairs=8, eval_n_pairs=12)
    batches = list(task.eval_batches("dense", n, bs, 0))
    assert [b.inputs.shape[0] for b in batches] == sizes
    assert all(b.inputs.shape[1] == 23 for b in batches)   # eval length, not training length
    for b in batches:
        for s in full_sequences(b):
            check_sequence(s)


def test_bad_arguments_raise(gen):
    with pytest.raises(ValueError):
        generate_flipflop(2, 1, 0.8, gen)
    with pytest.raises(ValueError):
        generate_flipflop(2, 8, 1.5, gen)
    with pytest.raises(ValueError, match="unknown split"):
        FlipFlop(n_pairs=8).eval_batch("nope", 2, gen)
