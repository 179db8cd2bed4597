"""Is randomized FIRE's short-length dip the draw mismatch between training and evaluation?
(issue 27 item 3; the rule is in README.md, "The dip, tested on the trained weights".)

Training batches mix 1..10 digits padded to the batch's longest row (68 input tokens in 97 % of
batches), and the sampler draws ONE sorted subset of [0, L) of that padded length per batch
(``train_draw='batch'``): a short row takes the first of those positions, packed close and far
from L. Evaluation draws each length's own subset of [0, L), spread over all of it. This script
evaluates one trained run twice on the same sequences (the recipe's evaluation seed, 100 per
length):

* ``eval``: the recipe's evaluation positions (a fresh draw of the block's own length);
* ``train``: positions drawn as training drew them, the first T of a sorted draw of
  max(T, T_pad) positions, T_pad the padded length of a 10-digit training row.

Only the positions differ. Writes one JSON line per run to OUT: EM in % per length and draw, and
``T``, each length's longest sequence in tokens.

    PYTHONPATH=. python experiments/addition-cpu-seeds/dip_eval.py OUT RUN_DIR [RUN_DIR ...]
"""
from __future__ import annotations

import json
import sys

import torch

import lengen
from lengen.eval import evaluate
from lengen.samplers.randomized import sorted_subset


def padded_length(task) -> int:
    """Input tokens of a training row at the task's longest training length (10 digits)."""
    longest = 0
    for seed in range(4):
        b = task.train_batch(64, torch.Generator().manual_seed(seed))
        longest = max(longest, b.inputs.shape[1])
    return longest


def main(out: str, *runs: str) -> None:
    for run in runs:
        cfg, task, model = lengen.load_run(run)
        sampler = model.sampler
        t_pad = padded_length(task)
        own = sampler.sample

        def train_like(length, *, training, device=None, generator=None, **kw):
            if training:
                return own(length, training=training, device=device, generator=generator, **kw)
            n = max(length, t_pad)
            return sorted_subset(n, sampler.max_length, device=device, generator=generator,
                                 sort=sampler.sort)[:length]

        splits = [f"len={n}" for n in range(1, 21)]
        rec = {"run": run, "t_pad": t_pad, "L": sampler.max_length}
        for name, fn in (("eval", own), ("train", train_like)):
            sampler.sample = fn
            rows = evaluate(model, task, splits, n_sequences=cfg.eval.sequences,
                            batch_size=cfg.eval.batch_size, seed=cfg.eval.seed)
            rec[name] = {r["split"]: round(100 * r["value"], 1) for r in rows
                         if r["metric"] == "seq_acc"}
            # tokens of the longest sequence per length (the two draws agree where T >= t_pad)
            rec["T"] = {r["split"]: r["length"] for r in rows if r["metric"] == "seq_acc"}
        sampler.sample = own
        print(json.dumps(rec), flush=True)
        with open(out, "a") as f:
            f.write(json.dumps(rec) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
