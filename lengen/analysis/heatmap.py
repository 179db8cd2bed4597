"""Attention heatmaps of a trained run (reads a run directory, never trains).

    from lengen.analysis.heatmap import plot_attention
    plot_attention("runs/tra", split="sparse", layer=-1, head=0, out="tra.png")

The sequence is the ``index``-th sequence of the run's own evaluation set for ``split`` (same
seed, and same evaluation positions, as ``eval.json``, so a sequence can be matched with the
reported accuracy);
``first_error=True`` picks the first evaluation sequence the model gets wrong instead. Weights
come from the attention kind's naive reference op (``Transformer.record_attention``), i.e. the
exact probabilities of the mechanism: for TRA, keys removed by the threshold have weight exactly 0;
for Diff they are ``softmax1 - lambda * softmax2`` (can be negative).

Rendering: rows are queries, columns keys; cells whose weight is exactly zero (future keys,
thresholded keys) are drawn pure black, as in the TRA paper's Figure 3 ("black means null
attention weight"); the colormap (``magma`` by default, whose low end is also near black) covers
the rest. Figures are made with Matplotlib's object API and the Agg canvas, so no global backend
is changed and no display is needed.
"""
from __future__ import annotations

import os

import numpy as np
import torch

from lengen.checks import Bool, Int, did_you_mean
from lengen.errors import ConfigError
from lengen.eval.evaluate import eval_stream, forward
from lengen.eval.metrics import restrict_to_outputs
from lengen.fileio import check_output_file, savefig_atomic
from lengen.rundir.load import load_run
from lengen.tasks.flipflop import CHARS as FLIPFLOP_CHARS


def token_labels(task, tokens) -> list[str]:
    """Characters for a task's token ids where the task has a character alphabet, else ids."""
    chars = getattr(task, "chars", None)
    if chars is None and task.name == "flipflop":
        chars = FLIPFLOP_CHARS
    return [chars[t] if chars and 0 <= t < len(chars) else str(t) for t in tokens]


@torch.inference_mode()
def attention_map(run_dir: str, split: str = "sparse", *, layer: int = -1, head: int = 0, index: int = 0,
                  seed: int | None = None, first_error: bool = False, device="cpu") -> dict:
    """Weights ``[T, T]`` (numpy) of one layer/head on one evaluation sequence, with its tokens.

    Returns ``{weights, tokens, labels, correct, index, split, layer, head, run, cfg}``."""
    for name, value in (("layer", layer), ("head", head), ("index", index)):
        Int().check(value, name)                      # an integer, before the run is read
    Bool().check(first_error, "first_error")
    cfg, task, model = load_run(run_dir, device=device)
    if cfg.model.backbone != "lengen":
        raise ConfigError(f"{run_dir} has a Hugging Face backbone (model.backbone="
                          f"{cfg.model.backbone}); attention heatmaps read lengen's own attention "
                          f"layers (model.backbone=lengen)")
    try:
        task.check_split(split)
    except ValueError as e:
        raise ConfigError(f"split: {e}") from None
    n_layers = len(model.blocks)
    if not -n_layers <= layer < n_layers:
        raise ConfigError(f"layer {layer} out of range: the model has {n_layers} layers (give "
                          f"0 .. {n_layers - 1}, or -1 for the last)")
    if index < 0 or index >= cfg.eval.sequences:
        raise ConfigError(f"index {index} out of range: the evaluation set of this run has "
                          f"{cfg.eval.sequences} sequences per split (give 0 .. "
                          f"{cfg.eval.sequences - 1})")
    out_slice = getattr(task, "output_slice", None)

    def correct_rows(logits, batch):
        logits, targets = restrict_to_outputs(logits, batch.targets, out_slice, batch.eval_mask)
        return ((logits.argmax(-1) == targets) | ~batch.eval_mask).all(dim=1)

    chosen = None
    seed = cfg.eval.seed if seed is None else seed
    for start, batch, pos in eval_stream(model, task, split, cfg.eval.sequences,
                                         cfg.eval.batch_size, seed, device):
        if first_error:
            wrong = (~correct_rows(forward(model, batch.inputs, pos), batch)).nonzero()
            if len(wrong):
                chosen = (batch, int(wrong[0]), pos)
                index = start + int(wrong[0])
                break
        elif start + batch.inputs.shape[0] > index:
            chosen = (batch, index - start, pos)
            break
    if chosen is None:
        raise ValueError(f"the model gets every one of the {cfg.eval.sequences} '{split}' evaluation "
                         f"sequences right; pass an index instead of first_error")
    batch, i, pos = chosen
    batch = batch.rows(i, i + 1)
    if pos is not None and pos.dim() == 2:
        pos = pos[i:i + 1]
    inputs = batch.inputs
    model.record_attention(True)
    try:
        logits = forward(model, inputs, pos)
        weights = model.blocks[layer].attn.last_weights
    finally:
        model.record_attention(False)
    if weights is None:
        raise RuntimeError(f"attention kind '{cfg.model.attention}' did not record weights")
    if not -weights.shape[1] <= head < weights.shape[1]:
        raise ConfigError(f"head {head} out of range: layer {layer} has {weights.shape[1]} "
                         f"attention maps")
    correct = bool(correct_rows(logits, batch)[0])
    tokens = inputs[0].tolist()
    return {"weights": weights[0, head].float().cpu().numpy(), "tokens": tokens,
            "labels": token_labels(task, tokens), "correct": correct, "index": index, "split": split,
            "layer": layer % n_layers, "head": head, "run": cfg.name or os.path.basename(run_dir),
            "cfg": cfg}


def zero_masked(weights: np.ndarray) -> np.ma.MaskedArray:
    """Weights with exact zeros masked (drawn in the colormap's 'bad' colour, black)."""
    return np.ma.masked_where(weights == 0, weights)


def black_zero_cmap(cmap="magma"):
    """Colormap whose masked ('bad') cells are pure black."""
    import matplotlib  # slow import: drawing only

    base = matplotlib.colormaps[cmap] if isinstance(cmap, str) else cmap
    return base.with_extremes(bad="black")


def render_attention(weights: np.ndarray, labels: list[str] | None = None, *, title: str | None = None,
                     cmap="magma", ax=None, colorbar: bool = True, max_tick_labels: int = 64,
                     figsize=(7.0, 6.0)):
    """Draw a ``[T_q, T_k]`` weight matrix; zero weights pure black. Returns the Figure."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # slow import: drawing only
    from matplotlib.figure import Figure  # slow import: drawing only

    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 2:
        raise ValueError(f"expected a [T_q, T_k] matrix, got shape {w.shape}")
    if ax is None:
        fig = Figure(figsize=figsize)
        FigureCanvasAgg(fig)
        ax = fig.add_subplot(1, 1, 1)
    else:
        fig = ax.figure
    ax.set_facecolor("black")
    vmin = min(0.0, float(w.min())) if w.size else 0.0
    vmax = float(w.max()) if w.size and w.max() > vmin else vmin + 1.0
    im = ax.imshow(zero_masked(w), cmap=black_zero_cmap(cmap), vmin=vmin, vmax=vmax,
                   interpolation="nearest", aspect="equal")
    tq, tk = w.shape
    if labels is not None and max(tq, tk) <= max_tick_labels:
        ax.set_xticks(range(tk), labels[:tk], fontsize=6, family="monospace")
        ax.set_yticks(range(tq), labels[:tq], fontsize=6, family="monospace")
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    if title:
        ax.set_title(title, fontsize=9)
    if colorbar:
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="attention weight (black = 0)")
    return fig


def _title(m: dict) -> str:
    cfg = m["cfg"]
    return (f"{m['run']}: {cfg.model.attention}+{cfg.model.posenc}, layer {m['layer']}, head {m['head']}\n"
            f"{m['split']} sequence #{m['index']} ({'correct' if m['correct'] else 'wrong'})")


def check_cmap(cmap) -> None:
    """A Matplotlib colormap name (or a Colormap object): ConfigError listing close names else."""
    if not isinstance(cmap, str):
        return
    import matplotlib  # slow import: drawing only


    names = sorted(n for n in matplotlib.colormaps if not n.endswith("_r"))
    if cmap not in matplotlib.colormaps:
        raise ConfigError(f"unknown colormap {cmap!r} (--cmap).{did_you_mean(cmap, names)} "
                          f"Matplotlib has {len(names)}, e.g. magma, viridis, inferno, gray, "
                          f"Blues (any name + '_r' reverses it); the list: "
                          f"python -c 'import matplotlib; print(list(matplotlib.colormaps))'")


def plot_attention(run_dir: str, split: str = "sparse", layer: int = -1, head: int = 0,
                   out: str | None = None, seed: int | None = None, index: int = 0, *,
                   first_error: bool = False, cmap="magma", dpi: int = 150, return_fig: bool = False):
    """Render one layer/head's attention of a trained run on one ``split`` sequence to a PNG.

    ``out`` defaults to ``RUN_DIR/attention-<split>-<index>-L<layer>H<head>.png``. Returns the
    path (or ``(path, fig)`` with ``return_fig=True``)."""
    check_cmap(cmap)
    if out is not None:             # refused before the model runs, not after
        check_output_file(out)
    m = attention_map(run_dir, split, layer=layer, head=head, index=index, seed=seed,
                      first_error=first_error)
    fig = render_attention(m["weights"], m["labels"], title=_title(m), cmap=cmap)
    out = out or os.path.join(run_dir, f"attention-{split}-{m['index']}-L{m['layer']}H{head}.png")
    savefig_atomic(fig, out, dpi=dpi)
    return (out, fig) if return_fig else out


def plot_attention_grid(run_dirs: list[str], out: str, *, titles: list[str] | None = None,
                        split: str = "sparse", layer: int = -1, head: int = 0, index: int = 0,
                        seed: int | None = None, cmap="magma", dpi: int = 150) -> str:
    """Several runs' attention on the same evaluation sequence, side by side (e.g. TRA vs FoT,
    the TRA paper's Figure 3). All runs must share the task config so the sequence is the same."""
    check_cmap(cmap)
    check_output_file(out, "out")
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # slow import: drawing only
    from matplotlib.figure import Figure  # slow import: drawing only

    maps = [attention_map(r, split, layer=layer, head=head, index=index, seed=seed) for r in run_dirs]
    if len({tuple(m["tokens"]) for m in maps}) > 1:
        raise ValueError("the runs do not see the same evaluation sequence (different task or "
                         "eval config); plot them one by one with plot_attention")
    fig = Figure(figsize=(6.5 * len(maps), 6.0))
    FigureCanvasAgg(fig)
    for i, m in enumerate(maps):
        ax = fig.add_subplot(1, len(maps), i + 1)
        render_attention(m["weights"], m["labels"], ax=ax, cmap=cmap,
                         title=(titles[i] + "\n" if titles else "") + _title(m))
    fig.tight_layout()
    savefig_atomic(fig, out, dpi=dpi)
    return out


__all__ = ["attention_map", "plot_attention", "plot_attention_grid", "render_attention",
           "zero_masked", "black_zero_cmap", "token_labels"]
