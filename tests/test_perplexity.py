"""Perplexity vs length: the blocked scorer against full logits, known distributions, protocols,
every attention kind at 32x the training length with memory linear in the length, and the plot."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch

from lengen.attention import ATTENTIONS
from lengen.eval import evaluate
from lengen.eval.perplexity import evaluate_perplexity, reference_nll, score_batch
from lengen.model import ModelConfig, Transformer
from lengen.tasks import build_task
from lengen.tasks.base import Batch


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("token-cache"))


def task_for(cache, **kw):
    args = dict(tokenizer="bytes", seq_len=16, max_chars=40_000, cache_dir=cache,
                eval_lengths=[16, 64, 512], max_eval_tokens=1024)
    return build_task("text", **dict(args, **kw))


def model_for(task, attention="softmax", posenc="nope", seed=0, **kw):
    torch.manual_seed(seed)
    return Transformer(ModelConfig(vocab_size=task.vocab_size, d_model=32, n_layers=2, n_heads=2,
                                   attention=attention, posenc=posenc, **kw)).eval()


@pytest.mark.parametrize("attention", ["softmax", "tra"])
@pytest.mark.parametrize("T", [1, 63, 111])
def test_blocked_scoring_equals_full_logits(T, attention):
    torch.manual_seed(T)
    m = Transformer(ModelConfig(vocab_size=97, d_model=32, n_layers=2, n_heads=2,
                                attention=attention, posenc="rope")).double().eval()
    x, y = torch.randint(0, 97, (3, T)), torch.randint(0, 97, (3, T))
    mask = torch.rand(3, T) < 0.6
    mask[0] = True
    batch = Batch(x, y, mask, mask)
    want = reference_nll(m, batch)
    for block in (97, 97 * 5, 1 << 22):                    # 1 row, 5 rows, everything per block
        got = score_batch(m, batch, logits_per_block=block)
        assert got["tokens"] == want["tokens"] == int(mask.sum())
        assert got["nll_sum"] == pytest.approx(want["nll_sum"], rel=1e-10)
    assert isinstance(m.head, torch.nn.Linear)             # the head is restored afterwards


def test_uniform_model_has_perplexity_vocab_size(cache):
    task = task_for(cache)
    m = model_for(task)
    torch.nn.init.zeros_(m.head.weight)                    # every logit 0: uniform over 257 ids
    rows = evaluate_perplexity(m, task, ["len=16", "len=512"])
    ppl = {r["length"]: r["value"] for r in rows if r["metric"] == "ppl"}
    nll = {r["length"]: r["value"] for r in rows if r["metric"] == "nll"}
    # fp32 log-softmax: ln 257 to ~1e-7, so perplexity to ~1e-6
    assert ppl[16] == pytest.approx(257, rel=1e-6) and ppl[512] == pytest.approx(257, rel=1e-6)
    assert nll[16] == pytest.approx(math.log(257), rel=1e-6)
    tokens = {r["length"]: r["tokens"] for r in rows}
    assert tokens == {16: 1024, 512: 1024}                 # the max_eval_tokens cap, whole windows


def test_perplexity_pools_nll_over_scored_targets(cache):
    """A model whose prediction does not depend on the input (all blocks output the same logits
    vector) has the cross-entropy of that fixed distribution against the targets' histogram."""
    task = task_for(cache)
    m = model_for(task)
    logits = torch.randn(task.vocab_size)
    for p in m.parameters():
        torch.nn.init.zeros_(p)
    with torch.no_grad():
        m.norm_f.weight.fill_(1.0)
        m.embed.weight[:, 0] = 1.0                         # every token embeds to e_0; zero blocks
        c = float(torch.nn.functional.rms_norm(m.embed.weight[0], (32,), eps=1e-6)[0])
        m.head.weight[:, 0] = logits / c                   # final norm: h = c e_0 -> logits
    starts, score_from = task.eval_plan("len=64")
    targets = torch.cat([torch.as_tensor(task.eval_ids[s + 1 + f:s + 65].astype("int64"))
                         for s, f in zip(starts, score_from)])
    want = float(-torch.log_softmax(logits.double(), 0)[targets].mean())
    rows = evaluate_perplexity(m, task, ["len=64"])
    assert rows[1]["metric"] == "nll" and rows[1]["value"] == pytest.approx(want, rel=1e-6)
    assert rows[0]["value"] == pytest.approx(math.exp(want), rel=1e-6)


def test_sliding_with_stride_equal_to_the_window_is_nonoverlapping(cache):
    m = model_for(task_for(cache))
    base = evaluate_perplexity(m, task_for(cache), ["len=16", "len=64"])
    slide = evaluate_perplexity(m, task_for(cache, eval_protocol="sliding", stride=16), ["len=16"])
    assert slide[0]["value"] == base[0]["value"] and slide[0]["tokens"] == base[0]["tokens"]
    assert slide[0]["protocol"] == "sliding" and slide[0]["stride"] == 16
    # a real stride scores the same number of targets with more context each
    slide8 = evaluate_perplexity(m, task_for(cache, eval_protocol="sliding", stride=8), ["len=64"])
    assert slide8[0]["tokens"] == 64 + 8 * ((1024 - 64) // 8)


def test_evaluate_routes_text_tasks_and_rows_carry_run_columns(cache):
    task = task_for(cache)
    m = model_for(task)
    meta = {"run": "r", "task": "text", "pe": "nope", "attention": "softmax", "seed": 0}
    rows = evaluate(m, task, ["len=16", "len=64"], n_sequences=10, batch_size=4, meta=meta)
    assert [(r["split"], r["length"], r["metric"]) for r in rows] == [
        ("len=16", 16, "ppl"), ("len=16", 16, "nll"), ("len=64", 64, "ppl"), ("len=64", 64, "nll")]
    assert all(r["sequences"] == 10 and r["run"] == "r" and r["eval_split"] == "validation"
               for r in rows)
    assert rows[0]["tokens"] == 160 and rows[2]["tokens"] == 640      # n_sequences caps windows
    # batch size and seed do not change what is scored (fp32 sums in another order: ~1e-7)
    again = evaluate(m, task, ["len=16", "len=64"], n_sequences=10, batch_size=3, seed=7, meta=meta)
    assert [r["tokens"] for r in again] == [r["tokens"] for r in rows]
    assert [r["value"] for r in again] == pytest.approx([r["value"] for r in rows], rel=1e-5)


def test_learned_positions_shorter_than_an_eval_length_fail_first(cache):
    task = task_for(cache)
    m = model_for(task, posenc="learned", posenc_kwargs={"max_positions": 64})
    with pytest.raises(ValueError, match="learned positional table has 64 rows"):
        evaluate_perplexity(m, task, ["len=16", "len=512"])


def test_randomized_positions_at_evaluation_are_seeded_per_block(cache):
    """A sampler that draws at evaluation (randomized positions) draws per block of windows from
    the evaluation seed: the same numbers for any batch size, torch's global RNG untouched, and
    equal to scoring each window with its block's positions by the full-logits reference."""
    from lengen.eval.evaluate import block_positions

    task = task_for(cache)
    m = model_for(task, posenc="rope", positions="randomized", positions_kwargs={"max_length": 256})
    state = torch.get_rng_state()
    a = evaluate_perplexity(m, task, ["len=64"], batch_size=64)
    b = evaluate_perplexity(m, task, ["len=64"], batch_size=5)
    assert torch.equal(state, torch.get_rng_state())
    assert b[1]["value"] == pytest.approx(a[1]["value"], rel=1e-6)
    other = evaluate_perplexity(m, task, ["len=64"], seed=7)
    assert other[1]["value"] != pytest.approx(a[1]["value"], rel=1e-6)   # another draw
    pos = block_positions(m, "len=64", 1234, 0, 64)                       # 16 windows: block 0
    assert not torch.equal(pos, torch.arange(64.0))
    nll, tokens = 0.0, 0
    for batch in task.eval_batches("len=64", None, 4):
        r = reference_nll(m, batch, positions=pos)
        nll, tokens = nll + r["nll_sum"], tokens + r["tokens"]
    assert a[1]["tokens"] == tokens and a[1]["value"] == pytest.approx(nll / tokens, rel=1e-6)


def test_batch_aware_samplers_get_the_window_lengths(cache, monkeypatch):
    """Interpolation / warping samplers read the rows' lengths: perplexity evaluation hands over
    each window's length K (every target of a non-overlapping window is scored)."""
    from lengen import samplers as P

    seen = []

    class Halved(P.PositionSampler):
        uses_batch, per_instance, random_at_eval = True, True, False

        def sample(self, length, *, training, device=None, generator=None, batch_size=None,
                   lengths=None, tokens=None):
            seen.append((length, lengths.tolist()))
            return torch.arange(length, dtype=torch.float32).expand(len(lengths), -1) / 2

        def max_position(self, length):
            return (length - 1) / 2

    monkeypatch.setitem(P.SAMPLERS, "halved", Halved)
    task = task_for(cache)
    m = model_for(task, posenc="rope", positions="halved")
    rows = evaluate_perplexity(m, task, ["len=16", "len=64"], batch_size=8)
    assert {k for k, _ in seen} == {16, 64}
    assert all(ls == [k] * len(ls) for k, ls in seen)
    batch = next(iter(task.eval_batches("len=64", 8, 8)))
    want = reference_nll(m, batch, positions=torch.arange(64.0) / 2)
    got = evaluate_perplexity(m, task, ["len=64"], n_sequences=8)
    assert got[1]["value"] == pytest.approx(want["nll_sum"] / want["tokens"], rel=1e-6)
    assert rows[3]["tokens"] == 1024


@pytest.mark.parametrize("attention", list(ATTENTIONS))
def test_every_attention_kind_evaluates_at_32x_the_training_length(cache, attention):
    task = task_for(cache)                                 # seq_len 16 -> len=512
    m = model_for(task, attention, posenc="rope" if attention == "softmax" else "nope")
    assert all(b.attn.use_lean() for b in m.blocks)        # eval mode takes the lean path
    rows = evaluate_perplexity(m, task, ["len=512"])
    assert rows[0]["length"] == 32 * task.seq_len and rows[0]["tokens"] == 1024
    assert math.isfinite(rows[0]["value"]) and 1 < rows[0]["value"] < 10 * task.vocab_size


MEMORY_CHILD = r"""
import json, sys, torch
from lengen.model import ModelConfig, Transformer
from lengen.tasks.base import Batch
from lengen.eval.perplexity import score_batch
torch.set_num_threads(1)

def status_kib(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))

specs, lengths = sys.argv[1].split(","), [int(t) for t in sys.argv[2:]]
peaks = {}
for spec in specs:                                     # "kind:impl"
    kind, impl = spec.split(":")
    m = Transformer(ModelConfig(vocab_size=512, d_model=32, n_layers=2, n_heads=2,
                                attention=kind, attn_impl=impl)).eval()
    for T in lengths:
        x = torch.randint(0, 512, (1, T)); mask = torch.ones(1, T, dtype=torch.bool)
        batch = Batch(x, x, mask, mask)
        score_batch(m, batch)                          # warm-up: one-time allocations
        with open("/proc/self/clear_refs", "w") as f:  # reset the peak RSS to the current RSS
            f.write("5")
        before = status_kib("VmRSS")
        score_batch(m, batch)
        peaks.setdefault(spec, {})[T] = (status_kib("VmHWM") - before) / 1024   # MiB at the peak
print(json.dumps(peaks))
"""


def peak_mib(specs, lengths):
    # A fixed mmap threshold makes glibc return every block of >= 64 KiB to the OS when freed, so
    # the peak RSS measures the live tensors, not heap fragmentation from growing query blocks.
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536")
    out = subprocess.run([sys.executable, "-c", MEMORY_CHILD, ",".join(specs), *map(str, lengths)],
                         capture_output=True, text=True, env=env, check=True).stdout
    return {spec: {int(k): v for k, v in d.items()} for spec, d in json.loads(out.splitlines()[-1]).items()}


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"),
                    reason="peak-RSS reset needs Linux /proc/self/clear_refs")
def test_eval_memory_grows_linearly_in_the_length():
    """Peak memory of scoring one window at 512 and 2048 tokens, every attention kind in eval
    mode (lean paths): x4 tokens should cost ~x4 memory (linear; < x6 allowed), where a dense
    [T, T] path costs ~x16 (checked on the naive softmax path, so the measurement can tell the two
    apart)."""
    specs = [f"{kind}:auto" for kind in ATTENTIONS] + ["softmax:naive"]
    # one process per spec: in a shared one, memory an earlier spec left mapped can hide a later
    # spec's 512-token peak (a token mixer read 0 MiB there)
    peaks = {spec: peak_mib([spec], [512, 2048])[spec] for spec in specs}
    # a peak of a few MiB moves by about one MiB from run to run (PaTH's 512-token peak read 2.3
    # to 3.7 MiB): a floor of 4 MiB under the ratio keeps that noise out, and a quadratic path
    # still reads ~x16 of its 512-token peak (~x8 even from 2 MiB)
    ratios = {spec: p[2048] / max(p[512], 4.0) for spec, p in peaks.items()}
    assert all(ratios[f"{kind}:auto"] < 6 for kind in ATTENTIONS), peaks
    assert ratios["softmax:naive"] > 10, peaks


def test_plot_marks_the_training_length(tmp_path):
    from lengen.analysis.perplexity_plot import perplexity_curves, plot_perplexity

    rows = [dict(run=run, seed=s, length=k, metric=metric, value=v * (1 + 0.1 * s))
            for run, base in (("rope", 30.0), ("tra", 25.0))
            for s in (0, 1) for k in (128, 256, 512, 4096)
            for metric, v in (("ppl", base * (k / 128) ** (0.5 if run == "rope" else -0.05)),
                              ("nll", 1.0))]
    rows.append(dict(run="failed", status="failed", metric=None, value=None))
    curves = perplexity_curves(rows, by=("run",))
    assert set(curves) == {("rope",), ("tra",)}
    assert curves[("tra",)][128] == pytest.approx([25.0, 27.5])
    out = tmp_path / "fig" / "ppl.png"
    fig = plot_perplexity(rows, str(out), by=("run",), train_length=128, title="stand-in")
    assert out.exists() and out.stat().st_size > 1000
    ax = fig.axes[0]
    assert ax.get_yscale() == "log" and ax.get_xscale() == "log"
    vlines = [ln for ln in ax.lines if list(ln.get_xdata()) == [128, 128]]
    assert len(vlines) == 1                                # the training length, marked
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["rope", "tra"]
    with pytest.raises(ValueError, match="no 'ppl' rows"):
        plot_perplexity([], None)
