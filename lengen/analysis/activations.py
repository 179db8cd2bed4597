"""Activation PCA across lengths (Ruoss et al. 2023, Fig. 5): do longer inputs push a model's
activations out of the distribution it saw in training? Reads run directories; never trains.

Protocol of the paper (section "Analyzing the activations"): 30 sequences of the training length
N = 40 and 30 of length 150 on Reverse String go through a trained model; for each layer (the
initial embeddings, then every encoder block) a non-whitened 2D PCA is fitted on the length-40
activations only, and both sets are projected with that same transformation. Standard relative
encodings leave the training cloud at length 150 in layers 3-4; randomized relative ones stay on it.

Choices the paper leaves open, stated here:

* **Which positions.** The paper counts 30 x 40 and 30 x 150 points, i.e. one point per *input*
  token (the encoder also holds 40 / 150 output placeholders). ``positions='input'`` (default)
  keeps the input tokens, ``'output'`` the placeholders, ``'all'`` both.
* **Which tensor.** "Embeddings" = the input to the first block (token embedding, scaled as the
  model does, plus any additive positional encoding); "layer k" = the output of block k (after
  its residual and, for post-norm models, its norm). Dropout is off (eval mode).
* **Positions at evaluation** follow the run's sampler (randomized samplers keep drawing fresh
  sorted positions, as the paper does), drawn from a generator seeded by ``seed``.

Besides the figure, :func:`activation_shift` puts a number on the overlap per layer: the distance
between the two clouds' means in the 2D projection, in units of the training cloud's spread
(root of its total variance), and the ratio of the spreads. A shift near 0 and a spread ratio
near 1 mean "same distribution" in that view; the paper's failing layers read as large shifts.

    from lengen.analysis.activations import plot_activations
    plot_activations(["runs/rpe/reverse_string-relative", "runs/rpe/reverse_string-rand_relative"],
                     lengths=(40, 150), n_sequences=30, out="fig5.png")
"""
from __future__ import annotations

import os

import numpy as np
import torch

from lengen.errors import ConfigError
from lengen.eval.metrics import restrict_to_outputs
from lengen.fileio import check_output_file, savefig_atomic
from lengen.model.memory import check_fits, check_work
from lengen.rundir.load import load_run
from lengen.tasks.chomsky.base import split_name

POSITIONS = ("input", "output", "all")


@torch.inference_mode()
def collect_activations(model, task, length: int, *, n_sequences: int = 30, seed: int = 0,
                        positions: str = "input", device="cpu") -> dict:
    """Run ``n_sequences`` sequences of input length ``length`` through ``model``.

    Returns ``{"layers": [array [n_points, D] per layer, embeddings first], "accuracy": float}``
    where accuracy is the per-token accuracy over the scored outputs (the paper quotes it)."""
    if positions not in POSITIONS:
        raise ValueError(f"unknown positions '{positions}'. Valid: {', '.join(POSITIONS)}")
    model.eval()
    gen = torch.Generator().manual_seed(seed)
    batch = task.eval_batch(split_name(length), n_sequences, gen).to(device)
    B, T = batch.inputs.shape
    pos = model.sample_positions(T, batch_size=B, device=device, generator=gen, batch=batch)
    captured = []
    # the embeddings = the first block's input (after any additive scheme and dropout)
    hooks = [model.blocks[0].register_forward_pre_hook(lambda m, args: captured.append(args[0]))]
    hooks += [b.register_forward_hook(lambda m, i, o: captured.append(o)) for b in model.blocks]
    try:
        logits = model(batch.inputs, positions=pos)                       # [B, T, V]
    finally:
        for h in hooks:
            h.remove()
    n_in = batch.inputs.shape[1] - int(batch.loss_mask[0].sum())          # input tokens
    keep = {"input": slice(0, n_in), "output": slice(n_in, None), "all": slice(None)}[positions]
    layers = [a[:, keep].reshape(-1, a.shape[-1]).float().cpu().numpy() for a in captured]
    lg, tg = restrict_to_outputs(logits, batch.targets, getattr(task, "output_slice", None),
                                 batch.eval_mask)
    right = ((lg.argmax(-1) == tg) & batch.eval_mask).sum().item()
    return {"layers": layers, "accuracy": right / max(int(batch.eval_mask.sum()), 1)}


def pca_2d(fit: np.ndarray):
    """Non-whitened 2D PCA fitted on ``fit`` [N, D] -> (mean [D], components [D, 2])."""
    mean = fit.mean(0)
    _, _, vt = np.linalg.svd(fit - mean, full_matrices=False)
    comps = vt[:2].T
    if comps.shape[1] < 2:                                  # D == 1: pad with a zero direction
        comps = np.concatenate([comps, np.zeros_like(comps)], axis=1)
    return mean, comps


def project(x: np.ndarray, mean: np.ndarray, comps: np.ndarray) -> np.ndarray:
    return (x - mean) @ comps                                           # [N, 2]


def activation_shift(train_2d: np.ndarray, test_2d: np.ndarray) -> dict:
    """``shift``: |mean(test) - mean(train)| / sqrt(total variance of train); ``spread``:
    sqrt(total variance of test / total variance of train). Both in the 2D projection."""
    var_tr = train_2d.var(0).sum()
    var_te = test_2d.var(0).sum()
    scale = np.sqrt(max(var_tr, 1e-12))
    return {"shift": float(np.linalg.norm(test_2d.mean(0) - train_2d.mean(0)) / scale),
            "spread": float(np.sqrt(var_te / max(var_tr, 1e-12)))}


def activation_pca(run_dir: str, lengths=(40, 150), *, n_sequences: int = 30, seed: int = 0,
                   positions: str = "input", device="cpu") -> dict:
    """PCA of every layer fitted on the first length, applied to all. Returns ``{run, lengths,
    accuracy: {length: acc}, layers: [{length: [N, 2] points}], shift: [{length: {...}}]}``."""
    if len(lengths) < 2:
        raise ValueError("give at least two lengths: the first is the fit (training) length")
    cfg, task, model = load_run(run_dir, device=device)
    if cfg.model.backbone != "lengen":
        raise ConfigError(f"{run_dir} has a Hugging Face backbone (model.backbone="
                          f"{cfg.model.backbone}); the activation PCA hooks lengen's own blocks "
                          f"(model.backbone=lengen)")
    model.check_length(task.max_input_length([f"len={n}" for n in lengths]))
    # refuse what cannot fit or would run for hours (--lengths, --n), before the first batch
    sizes = [task.max_input_length([f"len={n}"]) for n in lengths]
    check_fits(cfg.model, batch=n_sequences, length=max(sizes), training=False, device=device,
               weights_held=True, sizes=f"--n {n_sequences} sequences of up to {max(sizes)} "
                                         f"tokens (--lengths)",
               fix="Lower --n or the longest --lengths")
    check_work(cfg.model, sequences=n_sequences, length=sizes, device=device,
               what=f"collecting activations of {n_sequences} sequences (--n) at lengths "
                    f"{', '.join(map(str, lengths))} (--lengths)",
               fix="Lower --n or the longest --lengths")
    acts = {n: collect_activations(model, task, n, n_sequences=n_sequences, seed=seed,
                                   positions=positions, device=device) for n in lengths}
    fit_len = lengths[0]
    layers, shifts = [], []
    for li, fit in enumerate(acts[fit_len]["layers"]):
        mean, comps = pca_2d(fit)
        pts = {n: project(acts[n]["layers"][li], mean, comps) for n in lengths}
        layers.append(pts)
        shifts.append({n: activation_shift(pts[fit_len], pts[n]) for n in lengths[1:]})
    return {"run": cfg.name or os.path.basename(os.path.normpath(run_dir)),
            "lengths": list(lengths), "accuracy": {n: acts[n]["accuracy"] for n in lengths},
            "layers": layers, "shift": shifts}


def plot_activations(run_dirs, lengths=(40, 150), *, n_sequences: int = 30, seed: int = 0,
                     positions: str = "input", out: str | None = None, labels=None,
                     device="cpu") -> tuple[str, list[dict]]:
    """One row per run, one column per layer (embeddings, block 1, ...): 2D projections of the
    activations at each length, the first length in blue (fit set), the others in orange/green.
    Writes a PNG and returns (path, results of :func:`activation_pca` per run)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # slow import: drawing only
    from matplotlib.figure import Figure  # slow import: drawing only

    run_dirs = [run_dirs] if isinstance(run_dirs, str) else list(run_dirs)
    if out is not None:             # refused before the models run, not after
        check_output_file(out)
    results = [activation_pca(r, lengths, n_sequences=n_sequences, seed=seed,
                              positions=positions, device=device) for r in run_dirs]
    labels = labels or [r["run"] for r in results]
    n_cols = max(len(r["layers"]) for r in results)
    fig = Figure(figsize=(2.6 * n_cols, 2.6 * len(results) + 0.4))
    FigureCanvasAgg(fig)
    colors = ("tab:blue", "tab:orange", "tab:green", "tab:red")
    for ri, (res, label) in enumerate(zip(results, labels)):
        for li, pts in enumerate(res["layers"]):
            ax = fig.add_subplot(len(results), n_cols, ri * n_cols + li + 1)
            for ci, n in enumerate(res["lengths"]):
                ax.scatter(pts[n][:, 0], pts[n][:, 1], s=2, alpha=0.4, color=colors[ci % 4],
                           label=f"length {n}" if li == 0 else None, rasterized=True)
            ax.set_xticks([])
            ax.set_yticks([])
            title = "embeddings" if li == 0 else f"layer {li}"
            if li == 0:
                acc = ", ".join(f"{100 * res['accuracy'][n]:.1f}" for n in res["lengths"])
                ax.set_ylabel(f"{label}\nacc % {acc}", fontsize=7)
            ax.set_title(title, fontsize=8)
    fig.legend(loc="upper center", ncol=len(lengths), fontsize=8, markerscale=4)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    out = out or os.path.join(run_dirs[0], "activations-pca.png")
    savefig_atomic(fig, out, dpi=130)
    return out, results


__all__ = ["collect_activations", "pca_2d", "project", "activation_shift", "activation_pca",
           "plot_activations", "POSITIONS"]
