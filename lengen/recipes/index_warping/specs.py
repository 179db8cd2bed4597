"""Columns, exhibits and scales of ``lengen reproduce index-warping`` (the index-warping paper's
Sec. 5.1 and Appendix B.1): the tasks' M (``TASK_M``), the columns (``MODELS``, ``EVAL_ONLY``,
``CPU_MODELS``), which columns each exhibit shows (``FIG5``, ``TABLE_A``, ``FIG6``, ``FIGC``) and
the sizes per scale (``SCALES``). The protocol and what each scale is for are in :mod:`.recipe`.

Below both :mod:`.report` and :mod:`.recipe`, which import it; it imports neither.
"""
from __future__ import annotations

#: M (longest training length, items) of each task in the paper
TASK_M = {"copy": 20, "reverse": 20, "sort": 8, "summation": 8}
TEST_FACTOR = 5          # test lengths 2..5M

# columns: key -> (label, posenc, position sampler, sampler kwargs); randomized: L = k M below
MODELS = {
    "rope": ("RoPE", "rope", "identity", {}),
    "rope_pi": ("RoPE+PI", "rope", "interpolate", {}),
    "alibi": ("ALiBi", "alibi", "identity", {}),
    "rpe_10m": ("R.P. (10M)", "rope", "randomized", {"k": 10}),
    "rpe_5m": ("R.P. (5M)", "rope", "randomized", {"k": 5}),
    "rpe_3m": ("R.P. (3M)", "rope", "randomized", {"k": 3}),
    "ours_sqrt": ("Ours (sqrt)", "rope", "warp", {"preset": "head_tail", "skew": "sqrt"}),
    "ours_beta": ("Ours (beta)", "rope", "warp", {"preset": "head_tail", "skew": "beta"}),
    "head_only": ("head_only", "rope", "warp", {"preset": "head_only", "skew": "sqrt"}),
    "tail_only": ("tail_only", "rope", "warp", {"preset": "tail_only", "skew": "sqrt"}),
}
#: columns that are another column's weights evaluated with other positions -> that column.
#: PI is the identity in training, so RoPE+PI's training run would be RoPE's, bit for bit: the
#: recipe trains RoPE once and evaluates it twice (``eval-rope_pi.json`` in the RoPE run)
EVAL_ONLY = {"rope_pi": "rope"}


#: which columns each exhibit shows (Fig. 5's R.P. is the 10M one, Sec. 5.1)
FIG5 = ("rope", "rope_pi", "alibi", "rpe_10m", "ours_sqrt")
TABLE_A = ("rope", "rope_pi", "alibi", "rpe_10m", "rpe_5m", "rpe_3m", "ours_sqrt", "ours_beta")
FIG6 = ("head_only", "tail_only", "ours_sqrt")
FIG6_LABELS = {"ours_sqrt": "head_tail"}
FIGC = ("rpe_3m", "rpe_5m", "rpe_10m")

#: the cpu scale's columns: the Fig. 5 contrast (RoPE, RoPE+PI, ALiBi, ours) with the best
#: published randomized PE (3M) and Fig. 6's ablations; --models adds the others
CPU_MODELS = ("rope", "rope_pi", "alibi", "rpe_3m", "ours_sqrt", "head_only", "tail_only")

# --- sizes: one dict per scale (``per_task``: a task's own entries, as in randomized_pe) -------
SCALES = {
    "smoke": dict(tasks=("copy",), M={"copy": 3}, models=tuple(MODELS), seeds=(0,),
                  model=dict(d_model=16, n_layers=1, n_heads=2, d_ff=32, dropout=0.0),
                  steps=3, batch_size=8, lr=1e-3, warmup_steps=0, weight_decay=0.05,
                  min_lr_frac=0.0, train_size=None, test_stride=4, eval_sequences=4,
                  eval_batch_size=4, ckpt_every=0),
    "cpu": dict(tasks=tuple(TASK_M), M=dict(TASK_M), models=CPU_MODELS, seeds=(0,),
                model=dict(d_model=128, n_layers=3, n_heads=4, d_ff=512, dropout=0.0),
                steps=3000, batch_size=64, lr=1e-3, warmup_steps=150, weight_decay=0.05,
                min_lr_frac=0.0, train_size=None, test_stride=None, eval_sequences=64,
                eval_batch_size=64, ckpt_every=500,
                # summation fits its training lengths only at a lower lr and 4x the steps
                # (results/index-warping-summation/: RoPE at 3,000 x 1e-3 and 12,000 x 1e-3 sat
                # near chance beyond K = 2 and 4; 12,000 x 3e-4 fitted seeds 0 and 1)
                per_task={"summation": dict(steps=12_000, lr=3e-4)}),
    "paper": dict(tasks=tuple(TASK_M), M=dict(TASK_M), models=tuple(MODELS), seeds=(0, 1, 2),
                  model=dict(d_model=768, n_layers=12, n_heads=12, d_ff=3072, dropout=0.1),
                  steps=40_000, batch_size=64, lr=3e-5, warmup_steps=2400, weight_decay=0.05,
                  min_lr_frac=0.0, train_size=100_000, test_stride=1, eval_sequences=None,
                  eval_batch_size=128, ckpt_every=2000),
}
PAPER_TEST_SEQUENCES = 10_000          # in all, spread over the test lengths 2..5M


__all__ = ["TASK_M", "TEST_FACTOR", "MODELS", "EVAL_ONLY", "FIG5", "TABLE_A", "FIG6", "FIG6_LABELS",
           "FIGC", "CPU_MODELS", "SCALES", "PAPER_TEST_SEQUENCES"]
