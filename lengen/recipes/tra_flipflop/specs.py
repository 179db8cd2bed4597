"""Scales and tables of ``lengen reproduce tra-flipflop`` (the TRA paper's Table 1): what a scale
sets (``SCALES``), the Table 1 splits in the paper's row order (``SPLITS``), the Label position
range, the IID accuracy below which a model's OOD cells are marked (``IID_SOLVED``) and the
Appendix A heatmap pair. The protocol and what each scale is for are in :mod:`.recipe`; the model
columns in :mod:`lengen.recipes.tra_models`.

Below both :mod:`.report` and :mod:`.recipe`, which import it; it imports neither.
"""
from __future__ import annotations

# --- sizes: one dict per scale ----------------------------------------------------------------
SCALES = {
    "smoke": dict(n_pairs=8, d_model=16, n_layers=1, n_heads=4, steps=4, batch_size=8, lr=3e-3,
                  warmup_steps=0, min_lr_frac=0.1, weight_decay=0.1, betas=(0.9, 0.95),
                  decay_all=False, dropout=0.0, seeds=(0,), eval_sequences=24, eval_batch_size=24,
                  ckpt_every=0),
    "cpu": dict(n_pairs=64, d_model=64, n_layers=4, n_heads=4, steps=2500, batch_size=32, lr=1e-3,
                warmup_steps=50, min_lr_frac=0.1, weight_decay=0.1, betas=(0.9, 0.95),
                decay_all=False, dropout=0.0, seeds=(0, 1, 2), eval_sequences=2000,
                eval_batch_size=250, ckpt_every=100),
    # the paper's width (d_model 256, 4 layers, 4 heads, MLP 512) at half its length, sized for
    # one GPU and short of the paper's 25k steps; OOD curves every 250 steps show whether the
    # numbers settled (issue 28 item 1; results/tra-flipflop-width/README.md)
    "width": dict(n_pairs=128, d_model=256, d_ff=512, n_layers=4, n_heads=4, steps=2500,
                  batch_size=32, lr=1e-3, warmup_steps=100, min_lr_frac=0.1, weight_decay=0.1,
                  betas=(0.9, 0.95), decay_all=False, dropout=0.0, seeds=(0, 1, 2),
                  eval_sequences=2000, eval_batch_size=500, ckpt_every=500, eval_every=250,
                  periodic_sequences=500),
    "paper": dict(n_pairs=256, d_model=256, n_layers=4, n_heads=4, steps=25_000, batch_size=64,
                  lr=1e-4, warmup_steps=0, min_lr_frac=0.0, weight_decay=0.01, betas=(0.9, 0.999),
                  decay_all=True, dropout=0.01, seeds=(0, 1, 2, 3), eval_sequences=10_000,
                  eval_batch_size=500, ckpt_every=1000),
}
LABEL_RANGE = 4          # Label: positions drawn from [0, LABEL_RANGE * T) (2048 at T = 512)
IID_SOLVED = 99.0        # % mean IID whole-sequence accuracy below which OOD cells are marked
HEATMAP_PAIR = ("TRA", "FoT")   # Appendix A: 2 layers, 1 head each

SPLITS = {"iid": "IID", "dense": "OOD dense", "sparse": "OOD sparse"}   # the paper's row order

__all__ = ["SCALES", "LABEL_RANGE", "IID_SOLVED", "HEATMAP_PAIR", "SPLITS"]
