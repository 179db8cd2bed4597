"""The encoder read-out of the Chomsky tasks (Ruoss et al. 2023): loss and argmax over the output
classes at the placeholders only, bidirectional attention, dropout off at evaluation, the paper's
encoder preset (parameter count), and bidirectional ALiBi against a hand-computed matrix."""
from __future__ import annotations

import pytest
import torch

from lengen.config import resolve
from lengen.eval.evaluate import evaluate_split
from lengen.eval.metrics import batch_stats, restrict_to_outputs
from lengen.model import ModelConfig, Transformer
from lengen.model.presets import RUOSS2023_ENCODER, preset
from lengen.posenc import ALiBi
from lengen.tasks import build_task
from lengen.train.loop import loss_fn, prepare


def tiny_encoder(task, **kw):
    torch.manual_seed(0)
    cfg = dict(RUOSS2023_ENCODER, d_model=16, n_layers=2, n_heads=2, d_ff=32, dropout=0.0,
               vocab_size=task.vocab_size)
    cfg.update(kw)
    return Transformer(ModelConfig(**cfg))


def train_loss(model, task, batch):
    """The training loop's loss path (restrict to the output classes, then loss_fn)."""
    logits = model(batch.inputs)
    logits.retain_grad()
    out, targets = restrict_to_outputs(logits, batch.targets, task.output_slice, batch.loss_mask)
    batch.targets = targets
    return loss_fn(out, batch), logits


def test_loss_touches_only_output_logits_at_placeholders(gen):
    task = build_task("reverse_string")
    model = tiny_encoder(task)
    batch = task.batch_for_length(7, 4, gen)          # 7 inputs + 7 placeholders
    loss, logits = train_loss(model, task, batch)
    loss.backward()
    g = logits.grad.abs()                             # [B, T, V]
    sl = task.output_slice
    assert g[:, :7].sum() == 0                        # input positions: no gradient at all
    assert (g[:, 7:, sl].sum(-1) > 0).all()           # every placeholder: output classes
    outside = torch.ones(task.vocab_size, dtype=torch.bool)
    outside[sl] = False
    assert g[:, :, outside].sum() == 0                # input ids and the placeholder id: none


def test_restricted_argmax_and_targets():
    # a huge logit on an input id must not count: argmax and CE range over the output classes
    sl = slice(2, 4)
    logits = torch.zeros(1, 3, 5)
    logits[0, :, 0] = 50.0                            # input id 0 dominates the full vocabulary
    logits[0, 1, 3] = 1.0                             # output class 1 at the scored position
    targets = torch.tensor([[4, 3, 4]])               # placeholder, class 1 (id 3), placeholder
    mask = torch.tensor([[False, True, False]])
    assert batch_stats(logits, targets, mask)["tokens_correct"] == 0
    out, t = restrict_to_outputs(logits, targets, sl, mask)
    assert out.shape == (1, 3, 2) and t[0, 1] == 1
    s = batch_stats(out, t, mask)
    assert s["tokens_correct"] == 1 and s["nll_sum"] < 0.32      # -log(e / (1 + e)) = 0.313
    with pytest.raises(ValueError, match="outside the task's output classes"):
        restrict_to_outputs(logits, torch.tensor([[4, 0, 4]]), sl, mask)
    # no slice (flip-flop): the very same tensors come back
    assert restrict_to_outputs(logits, targets, None, mask) == (logits, targets)
    assert getattr(build_task("flipflop"), "output_slice", None) is None


def test_bidirectional_read_out_sees_far_inputs(gen):
    task = build_task("reverse_string")
    for causal in (False, True):
        model = tiny_encoder(task, causal=causal, init_std=0.2).eval()
        batch = task.batch_for_length(30, 2, gen)
        x2 = batch.inputs.clone()
        x2[:, 0] = 1 - x2[:, 0]                        # flip the first input symbol
        x3 = batch.inputs.clone()
        x3[:, 29] = 1 - x3[:, 29]                      # flip the last input symbol
        with torch.no_grad():
            base, far, late = model(batch.inputs), model(x2), model(x3)
        # the last placeholder (59 tokens away) depends on the first input
        assert (base[:, -1] - far[:, -1]).abs().max() > 1e-4
        # position 0 depends on a later token only without the causal mask
        moved = (base[:, 0] - late[:, 0]).abs().max()
        assert (moved > 1e-4) if not causal else (moved == 0)


def test_dropout_off_at_evaluation(gen):
    task = build_task("even_pairs", max_train_length=5, max_eval_length=12)
    model = tiny_encoder(task, dropout=0.5)
    x = task.batch_for_length(9, 8, gen).inputs
    model.train()
    with torch.no_grad():
        assert not torch.equal(model(x), model(x))     # dropout active while training
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(x), model(x))
    model.train()
    a = evaluate_split(model, task, "len=9", 16, 8, seed=3)
    b = evaluate_split(model, task, "len=9", 16, 8, seed=3)
    assert a == b and model.training                  # deterministic, and training mode restored


def test_preset_parameter_count():
    # ours: 5 x 49,728 (blocks) + 2 x 5 x 64 (embedding + head over 5 ids) = 249,280 on a binary
    # task; the paper states 249,026 (its in/out layers are one-hots with biases: 386 params);
    # relative (xl) adds W_r, u, v once (4,224), the reference once per layer (270,146 in total)
    for task_name, pe, want, paper in (("even_pairs", "nope", 249_280, 249_026),
                                       ("even_pairs", "xl", 253_504, 270_146)):
        cfg = resolve(preset("ruoss2023-encoder", posenc=pe), [f"task.name={task_name}"]).config
        cfg.model.vocab_size = build_task(task_name).vocab_size
        _, model = prepare(cfg)
        assert model.num_params() == want
        if pe == "nope":
            assert abs(want - paper) / paper < 0.002
    mc = cfg.model
    assert (mc.n_layers, mc.n_heads, mc.d_model, mc.d_ff, mc.mlp) == (5, 8, 64, 256, "relu")
    assert (mc.norm, mc.norm_position, mc.final_norm, mc.embed_scale) == \
        ("layer", "post", False, True)
    assert (mc.dropout, mc.causal) == (0.1, False)
    tc = cfg.train
    assert (tc.optimizer, tc.weight_decay, tc.schedule, tc.warmup_steps) == \
        ("adam", 0.0, "constant", 0)
    assert (tc.grad_clip, tc.batch_size, tuple(tc.betas)) == (1.0, 128, (0.9, 0.999))


def test_bidirectional_alibi_hand_computed():
    # m_h (-|i - j| + 0.5 [j < i]), slopes 2^-4, 2^-8 for two heads; positions need not be 0..T-1
    alibi = ALiBi(d_model=8, n_heads=2, head_dim=4, causal=False, encoder_asymmetric=True)
    for pos, dist in ((torch.tensor([0.0, 1, 2]), [[0, -1, -2], [-0.5, 0, -1], [-1.5, -0.5, 0]]),
                      (torch.tensor([3.0, 10, 11]), [[0, -7, -8], [-6.5, 0, -1], [-7.5, -0.5, 0]])):
        want = torch.tensor([2.0 ** -4, 2.0 ** -8])[:, None, None] * torch.tensor(dist)[None]
        torch.testing.assert_close(alibi.bias(pos, pos), want, rtol=0, atol=1e-7)
    # without the option (or in a decoder) it is the symmetric -m |i - j|
    sym = ALiBi(d_model=8, n_heads=2, head_dim=4, causal=False)
    b = sym.bias(torch.arange(3.0), torch.arange(3.0))
    torch.testing.assert_close(b, b.transpose(1, 2))


def test_training_loop_hands_loss_fn_output_logits_only(tmp_path, monkeypatch):
    import importlib

    loop = importlib.import_module("lengen.train.loop")   # lengen.train is also the function
    seen = []
    orig = loop.loss_fn

    def spy(logits, batch):
        seen.append((logits.shape[-1], batch.targets[batch.loss_mask].unique().tolist()))
        return orig(logits, batch)

    monkeypatch.setattr(loop, "loss_fn", spy)
    cfg = resolve(preset("ruoss2023-encoder", d_model=16, n_layers=1, n_heads=2, d_ff=32),
                  ["task.name=bucket_sort", "task.kwargs={max_train_length: 6, max_eval_length: 8}",
                   "train.steps=2", "train.batch_size=4", "train.progress=false",
                   "eval.splits=[len=7]", "eval.sequences=2"])
    loop.train(cfg, str(tmp_path), quiet=True)
    task = build_task("bucket_sort")
    assert len(seen) == 2
    for width, targets in seen:                     # 5 classes, targets shifted into 0..4
        assert width == task.output_size == 5 and set(targets) <= set(range(5))
