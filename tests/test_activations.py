"""Activation PCA across lengths (Ruoss et al. Fig. 5; lengen.analysis.activations)."""
from __future__ import annotations

import numpy as np
import pytest

import lengen
from lengen.analysis.activations import (activation_pca, activation_shift, pca_2d,
                                         plot_activations, project)
from lengen.model.presets import preset


def test_pca_matches_covariance_eigenvectors():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(500, 6)) @ rng.normal(size=(6, 6)) + 3.0
    mean, comps = pca_2d(x)
    w, V = np.linalg.eigh(np.cov(x - x.mean(0), rowvar=False, bias=True))
    top = V[:, ::-1][:, :2]
    assert np.allclose(np.abs(comps.T @ top), np.eye(2), atol=1e-8)
    p = project(x, mean, comps)
    assert np.allclose(p.mean(0), 0, atol=1e-9)
    assert np.allclose(p.var(0), w[::-1][:2], rtol=1e-8)        # non-whitened: variances kept


def test_shift_tells_same_from_moved_clouds():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(2000, 2)), rng.normal(size=(2000, 2))
    same = activation_shift(a, b)
    moved = activation_shift(a, b * 3 + 5)
    assert same["shift"] < 0.1 and abs(same["spread"] - 1) < 0.1
    assert moved["shift"] > 3 and moved["spread"] > 2.5


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("act") / "rev"
    cfg = preset("ruoss2023-encoder", posenc="xl", positions="randomized",
                 positions_kwargs={"max_length": 256})
    cfg["model"].update(n_layers=2, d_model=16, n_heads=2, d_ff=32)
    cfg["task"] = {"name": "reverse_string", "kwargs": {"max_train_length": 8,
                                                         "max_eval_length": 40}}
    cfg["train"].update(steps=3, batch_size=4, progress=False)
    cfg["eval"] = {"splits": ["len=9"], "sequences": 4, "batch_size": 4}
    lengen.train(lengen.resolve(cfg), str(d), quiet=True)
    return str(d)


def test_activation_pca_shapes_and_fit_set(run_dir):
    res = activation_pca(run_dir, (8, 20), n_sequences=5, seed=0)
    assert len(res["layers"]) == 3                          # embeddings + 2 blocks
    for li, pts in enumerate(res["layers"]):
        assert pts[8].shape == (5 * 8, 2) and pts[20].shape == (5 * 20, 2)
        assert np.allclose(pts[8].mean(0), 0, atol=1e-4)    # fitted (centred) on length 8
        assert 20 in res["shift"][li]
    assert set(res["accuracy"]) == {8, 20}
    out = activation_pca(run_dir, (8, 20), n_sequences=5, seed=0, positions="all")
    assert out["layers"][0][8].shape == (5 * 16, 2)        # inputs + placeholders


def test_plot_activations_writes_png(run_dir, tmp_path):
    out, results = plot_activations([run_dir, run_dir], (8, 12), n_sequences=3,
                                    out=str(tmp_path / "fig5.png"), labels=["a", "b"])
    assert (tmp_path / "fig5.png").stat().st_size > 1000 and len(results) == 2


def test_bad_inputs(run_dir):
    with pytest.raises(ValueError, match="at least two lengths"):
        activation_pca(run_dir, (8,))
    with pytest.raises(ValueError, match="positions"):
        activation_pca(run_dir, (8, 12), positions="middle")
    with pytest.raises(ValueError, match="max_length"):            # beyond the sampler's L
        activation_pca(run_dir, (8, 200))
