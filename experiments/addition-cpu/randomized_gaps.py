"""Why randomized FIRE is weak on short additions at cpu scale (issue 27, item 3): the spread of
the randomized positions an n-digit example gets in training vs at evaluation.

No model is trained: the positions are drawn by lengen's own code for the cpu scale's FIRE run
(``lengen.recipes.addition.specs.run_config('fire', 'cpu')``: N = 10, batch 32, L = 256, the
addition task with hints), in training exactly as ``lengen.train.loop`` does (one
``task.train_batch`` from the data generator, then ``model.sample_positions`` of the batch's padded
length T from the positions generator) and at evaluation as ``lengen.eval.evaluate`` does (one draw
of the split's own length per block). For every number of digits n it reports, over the example's
real input tokens (6n + 8 of them):

* ``mean_gap``: median over examples of the mean distance between consecutive positions (the
  ``i - j`` of a previous-token lookup);
* ``gap_p99``: the 99th percentile of those consecutive distances;
* ``last``: median of the last input position (the query position ``i`` of the answer's last
  token; FIRE divides ``psi(i - j)`` by ``psi(i)``);
* ``wide``: the share of consecutive distances above the largest 0.1% of those seen in training
  (pooled over all training rows, default draw);
* ``em_randomized`` / ``em_identity``: EM at n digits of the cpu scale's FIRE runs with randomized
  positions and with positions 0..T-1 (``fire-s0-d0``, ``fire-norand-s0-d0`` in ``results.csv``).

Phases: ``train`` (the default ``train_draw='batch'``), ``eval``, and ``train-row`` (the
``train_draw='row'`` option, which draws each row's own length). Writes ``randomized_gaps.csv`` and
prints a markdown table; under a minute on one core::

    OMP_NUM_THREADS=1 PYTHONPATH=. python experiments/addition-cpu/randomized_gaps.py
"""
from __future__ import annotations

import os

import pandas as pd
import torch

from lengen import build_task
from lengen.recipes.addition import SCALES, run_config
from lengen.samplers import build_sampler

HERE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "results", "addition-cpu")   # the results folder this script reads and writes
BATCHES, EVAL_DRAWS = 2000, 2000


def row_stats(pos: torch.Tensor, lengths: torch.Tensor):
    """pos [B, T], lengths [B] -> (mean gap [B], last position [B], gaps [G], gap row [G]): the
    consecutive distances inside every row's real tokens, with the row each comes from."""
    B, T = pos.shape
    gaps = pos[:, 1:] - pos[:, :-1]                                      # [B, T - 1]
    real = torch.arange(T - 1)[None, :] < (lengths - 1)[:, None]         # gaps inside the row
    last = pos.gather(1, (lengths - 1)[:, None])[:, 0]
    mean_gap = (last - pos[:, 0]) / (lengths - 1).clamp_min(1)
    row = torch.arange(B)[:, None].expand(B, T - 1)
    return mean_gap, last, gaps[real], row[real]


def exact_match(run: str) -> dict:
    """{n: EM} of one cpu-scale run at the end of training (``results.csv``)."""
    d = pd.read_csv(os.path.join(HERE, "results.csv"))
    d = d[(d.run == run) & (d.metric == "seq_acc") & (d.group == "main") & (d.step == 5000)
          & d.split.str.startswith("len=")]
    return {int(sp[4:]): v for sp, v in zip(d.split, d.value)}


def main():
    cfg = run_config("fire", "cpu-5k")        # the scale this folder ran ('cpu' until 2026-11-28)
    kw = cfg["model"]["positions_kwargs"]
    B, N, M = cfg["train"]["batch_size"], SCALES["cpu-5k"]["N"], SCALES["cpu-5k"]["M"]
    task = build_task("addition", **cfg["task"]["kwargs"])
    digits = torch.zeros(task.input_length(M) + 1, dtype=torch.long)
    for n in range(1, M + 1):
        digits[task.input_length(n)] = n                                 # prompt + answer
    parts = {}                                  # phase -> lists of (n, mean gap, last), (n, gap)
    for phase, draw in (("train", "batch"), ("train-row", "row")):
        sampler = build_sampler("randomized", **kw, train_draw=draw)
        data_gen, pos_gen = torch.Generator().manual_seed(0), torch.Generator().manual_seed(1)
        rows, gaps = [], []
        for _ in range(BATCHES):
            batch = task.train_batch(B, data_gen)
            lengths = batch.lengths()
            T = batch.inputs.shape[1]
            pos = sampler.sample(T, training=True, generator=pos_gen, batch_size=B,
                                 lengths=lengths)
            pos = pos.expand(B, T) if pos.dim() == 1 else pos
            mean_gap, last, g, r = row_stats(pos, lengths)
            n = digits[lengths]
            rows.append(torch.stack([n.float(), mean_gap, last], 1))
            gaps.append(torch.stack([n[r].float(), g], 1))
        parts[phase] = (torch.cat(rows), torch.cat(gaps))
    sampler = build_sampler("randomized", **kw)
    rows, gaps = [], []
    for n in range(1, M + 1):
        T = task.input_length(n)
        g = torch.Generator().manual_seed(n)
        pos = torch.stack([sampler.sample(T, training=False, generator=g)
                           for _ in range(EVAL_DRAWS)])                  # [draws, T]
        mean_gap, last, gp, _ = row_stats(pos, torch.full((EVAL_DRAWS,), T))
        rows.append(torch.stack([torch.full_like(last, n), mean_gap, last], 1))
        gaps.append(torch.stack([torch.full_like(gp, n), gp], 1))
    parts["eval"] = (torch.cat(rows), torch.cat(gaps))
    top = torch.quantile(parts["train"][1][:, 1], 0.999).item()   # largest 0.1% of training gaps
    em_rand, em_norand = exact_match("fire-s0-d0"), exact_match("fire-norand-s0-d0")
    out = []
    for n in range(1, M + 1):
        for phase, (rows, gaps) in parts.items():
            r, g = rows[rows[:, 0] == n], gaps[gaps[:, 0] == n][:, 1]
            if not len(r):
                continue
            out.append({"phase": phase, "n": n, "input_tokens": task.input_length(n),
                        "examples": len(r), "mean_gap": round(r[:, 1].median().item(), 2),
                        "gap_p99": torch.quantile(g, 0.99).item(),
                        "last": r[:, 2].median().item(),
                        "wide": round((g > top).float().mean().item(), 4),
                        "em_randomized": em_rand.get(n), "em_identity": em_norand.get(n)})
    df = pd.DataFrame(out)
    df.to_csv(os.path.join(HERE, "randomized_gaps.csv"), index=False)
    print(f"cpu scale: N = {N}, batch {B}, L = {kw['max_length']}; {BATCHES} training batches, "
          f"{EVAL_DRAWS} evaluation draws per length; 'wide': share of gaps > {top:.0f}, the "
          f"largest 0.1% of training gaps (train_draw=batch)\n")
    cols = [("mean_gap", "train"), ("mean_gap", "eval"), ("mean_gap", "train-row"),
            ("gap_p99", "train"), ("gap_p99", "eval"), ("last", "train"), ("last", "eval"),
            ("last", "train-row"), ("wide", "eval")]
    print("| n | EM rand. / 0..T-1 | " + " | ".join(f"{m} {ph}" for m, ph in cols) + " |")
    print("|---:" * (len(cols) + 2) + "|")
    for n in range(1, M + 1):
        cell = {(r.metric, r.phase): r.value for r in df[df.n == n].melt(
            id_vars=["phase"], var_name="metric").itertuples()}
        em = f"{em_rand.get(n, float('nan')):.2f} / {em_norand.get(n, float('nan')):.2f}"
        print(f"| {n} | {em} | " + " | ".join(
            "" if (m, ph) not in cell else f"{cell[(m, ph)]:g}" for m, ph in cols) + " |")


if __name__ == "__main__":
    main()
