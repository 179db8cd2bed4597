"""Why no budget fits NoPE on bucket sort, reverse string and even pairs (battery v2's fit
search, ``results/bench-cpu/README.md``): the Chomsky cells' model is an encoder (no causal
mask, Ruoss et al. 2023), and without positions an encoder is permutation-equivariant. Every
output placeholder is the same token, so every placeholder gets the same logits, and those
logits depend on the input only as a multiset. Shown here on the battery's own cpu model at
random init (the argument holds for any weights): the tasks' targets differ where the model's
outputs cannot."""
import pytest
import torch

from lengen.bench.battery import cell_config
from lengen.config import resolve
from lengen.train.loop import build_model


def _model_and_task(cell, seed=0):
    r = resolve(cell_config(cell, "cpu"))
    assert r.config.model.posenc == "nope" and not r.config.model.causal
    torch.manual_seed(seed)
    return build_model(r.config.model, r.task).eval(), r.task


def _batch(task, n, seed):
    return task.batch_for_length(n, 8, torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("cell", ["reverse_string", "bucket_sort"])
def test_every_output_position_gets_the_same_logits(cell):
    model, task = _model_and_task(cell)
    b = _batch(task, 9, seed=1)
    with torch.no_grad():
        logits = model(b.inputs)                                        # [B, T, V]
    out = logits[b.loss_mask].view(b.inputs.shape[0], -1, logits.shape[-1])  # [B, K, V]
    assert out.shape[1] > 1
    torch.testing.assert_close(out, out[:, :1].expand_as(out), atol=1e-5, rtol=1e-5)
    # while the targets differ across output positions in most rows: no one token fits them
    targets = b.targets[b.loss_mask].view(out.shape[:2])
    assert (targets != targets[:, :1]).any(dim=1).float().mean() > 0.5


@pytest.mark.parametrize("cell", ["reverse_string", "bucket_sort", "even_pairs",
                                  "missing_duplicate"])
def test_the_outputs_see_the_input_only_as_a_multiset(cell):
    model, task = _model_and_task(cell)
    b = _batch(task, 9, seed=2)
    L = b.inputs.shape[1] - int(b.loss_mask[0].sum())                   # input tokens
    perm = torch.randperm(L, generator=torch.Generator().manual_seed(3))
    shuffled = b.inputs.clone()
    shuffled[:, :L] = b.inputs[:, perm]
    with torch.no_grad():
        a, s = model(b.inputs), model(shuffled)
    torch.testing.assert_close(a[b.loss_mask], s[b.loss_mask], atol=1e-5, rtol=1e-5)


def test_even_pairs_labels_are_not_a_function_of_the_multiset():
    """Even pairs (the parity of unequal neighbours, i.e. first symbol xor last; Ruoss et al.
    2023) needs an order: two inputs
    with one multiset and different labels get one prediction from a NoPE encoder. Missing
    duplicate, by contrast, is a multiset function (the odd-count symbol), and its fit search
    fitted NoPE at four times the steps."""
    model, task = _model_and_task("even_pairs")
    x = torch.tensor([[0, 0, 1], [0, 1, 0]])                           # 'aab' vs 'aba'
    T = x.shape[1] + task.output_length(3)
    inputs = torch.full((2, T), task.placeholder, dtype=torch.long)
    inputs[:, :3] = x
    with torch.no_grad():
        logits = model(inputs)[:, 3:]
    torch.testing.assert_close(logits[0], logits[1], atol=1e-5, rtol=1e-5)
    labels = ((x[:, 1:] != x[:, :-1]).sum(1) % 2).tolist()          # the task's own rule
    assert labels[0] != labels[1]
