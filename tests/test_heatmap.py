"""Attention heatmaps: PNG written from a trained run, zero weights drawn pure black."""
from __future__ import annotations

import os

import numpy as np
import pytest

from lengen.analysis.heatmap import attention_map, plot_attention, render_attention
from lengen.cli import main
from lengen.config import resolve
from lengen.train import train


@pytest.fixture(scope="module")
def tra_run(tmp_path_factory):
    run = str(tmp_path_factory.mktemp("heat") / "tra")
    cfg = resolve({"model": {"attention": "tra", "d_model": 16, "n_layers": 2, "n_heads": 2},
                   "task": {"kwargs": {"n_pairs": 10}},
                   "train": {"steps": 3, "batch_size": 4, "warmup_steps": 0, "progress": False},
                   "eval": {"sequences": 6, "batch_size": 4}})
    train(cfg, run, quiet=True)
    return run


def pixel(fig, ax, img, i, j):
    """RGB (0-255) of the PNG at the centre of cell (query i, key j)."""
    x, y = ax.transData.transform((j, i))
    h = img.shape[0]
    return (img[int(round(h - y)), int(round(x)), :3] * 255).round()


def test_zero_weights_render_black_and_others_do_not(tmp_path):
    import matplotlib.image

    w = np.tril(np.full((6, 6), 0.5))
    w[3, 1] = 0.0                     # a removed key inside the causal window
    w[5, 0] = 1.0
    fig = render_attention(w, list("wri01r"))
    out = str(tmp_path / "m.png")
    fig.savefig(out, dpi=fig.dpi)
    img = matplotlib.image.imread(out)
    ax = fig.axes[0]
    for i, j in [(0, 5), (2, 4), (3, 1)]:
        assert (pixel(fig, ax, img, i, j) == 0).all(), (i, j)
    for i, j in [(5, 0), (4, 2), (0, 0)]:
        assert pixel(fig, ax, img, i, j).max() > 40, (i, j)
    assert [t.get_text() for t in ax.get_xticklabels()] == list("wri01r")


def test_plot_attention_of_a_trained_run(tra_run, tmp_path):
    import matplotlib.image

    out = str(tmp_path / "a.png")
    path, fig = plot_attention(tra_run, split="sparse", layer=-1, head=1, out=out, index=2,
                               dpi=100, return_fig=True)
    assert path == out and os.path.getsize(out) > 1000
    m = attention_map(tra_run, "sparse", layer=-1, head=1, index=2)
    w = m["weights"]
    T = len(m["tokens"])
    assert w.shape == (T, T) == (19, 19) and m["layer"] == 1
    assert np.allclose(np.triu(w, 1), 0)                      # causal
    rows = w.sum(1)
    assert np.all(np.isclose(rows, 1, atol=1e-5) | np.isclose(rows, 0))   # TRA: a row sums to 1 or is empty
    img = matplotlib.image.imread(out)
    ax = fig.axes[0]
    zeros = np.argwhere(w == 0)
    assert len(zeros) > T * (T - 1) // 2                       # thresholded past keys too
    for i, j in zeros[:: max(1, len(zeros) // 40)]:
        assert (pixel(fig, ax, img, i, j) == 0).all(), (i, j)
    i, j = np.unravel_index(w.argmax(), w.shape)
    assert pixel(fig, ax, img, i, j).max() > 100
    # the default output lands in the run directory; the CLI writes where asked
    assert plot_attention(tra_run).startswith(tra_run)
    cli_out = str(tmp_path / "cli.png")
    assert main(["plot", "attention", tra_run, "--split", "dense", "--layer", "0", "--head", "0",
                 "--index", "1", "--out", cli_out]) == 0
    assert os.path.getsize(cli_out) > 1000


def test_sequence_selection_matches_the_eval_set_and_bad_indices_fail(tra_run):
    import torch

    from lengen.train.loop import load_run

    cfg, task, _ = load_run(tra_run)
    seqs = torch.cat([b.inputs for b in task.eval_batches("iid", cfg.eval.sequences,
                                                          cfg.eval.batch_size, cfg.eval.seed)])
    for idx in (0, 5):
        assert attention_map(tra_run, "iid", index=idx)["tokens"] == seqs[idx].tolist()
    first = attention_map(tra_run, "iid", first_error=True)      # 3 training steps: wrong often
    assert first["correct"] is False and first["tokens"] == seqs[first["index"]].tolist()
    with pytest.raises(ValueError, match="index 6 out of range"):
        attention_map(tra_run, "iid", index=6)
    with pytest.raises(ValueError, match="layer 2 out of range"):
        attention_map(tra_run, "iid", layer=2)
    with pytest.raises(ValueError, match="head 2 out of range"):
        attention_map(tra_run, "iid", head=2)
