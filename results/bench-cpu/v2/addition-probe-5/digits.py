"""Which answer tokens an addition run gets wrong: teacher-forced accuracy per answer position
at each training length, from a run directory's final weights, on the run's own evaluation
draws (its ``eval.seed``, 100 sequences per length).

    python results/bench-cpu/v2/addition-probe-5/digits.py OUT.csv RUN_DIR [RUN_DIR ...]

Writes one row per (run, length, answer position): ``kind`` is ``hint``, ``digit`` or ``eos``,
``place`` the digit's significance (1 = least significant, written first in the reversed
format; ``n + 1`` is the carry out of the zero pads), ``acc`` the share of the sequences whose
token there is predicted right. Each length's exact match (every answer token right) is checked
against the run's own ``eval.csv`` before anything is written. lengen's own error analysis
(:func:`lengen.eval.addition_errors.addition_error_analysis`) reads greedy generations, where
one wrong digit can derail the ones after it; teacher forcing scores each place on its own,
which is what telling the plateau's places apart needs. Run directories are not
committed (their weights are large); each run's config is (``configs/``), so a run can be
retrained and read again.
"""
from __future__ import annotations

import csv
import os
import sys

import torch

from lengen.rundir.load import load_run_at
from lengen.tasks.sequence.base import EOS, seeded_eval_batches


def run_rows(run_dir: str) -> list[dict]:
    cfg, task, model, step = load_run_at(run_dir)
    model.eval()
    top = task.max_train_length
    assert task.name == "addition" and task.format == "reversed" and task.hints
    saved = {}
    for r in csv.DictReader(open(os.path.join(run_dir, "eval.csv"), newline="")):
        if r["metric"] == "seq_acc":
            saved[r["split"]] = float(r["value"])
    rows = []
    for n in range(1, top + 1):
        split = f"len={n}"
        (batch,) = list(seeded_eval_batches(task, split, cfg.eval.sequences, cfg.eval.sequences,
                                            cfg.eval.seed))
        with torch.no_grad():
            right = model(batch.inputs).argmax(-1) == batch.targets        # [B, T]
        m = batch.eval_mask                                                 # [B, T]
        cols = [torch.nonzero(m[i]).flatten() for i in range(m.shape[0])]
        assert len({len(c) for c in cols}) == 1, "every row of a length has one answer length"
        hits = torch.stack([right[i, c] for i, c in enumerate(cols)]).float()   # [B, A]
        exact = float(hits.min(1).values.mean())
        assert abs(exact - saved[split]) < 1e-6, (run_dir, split, exact, saved[split])
        tokens = batch.targets[0, cols[0]].tolist()
        for k, (tok, acc) in enumerate(zip(tokens, hits.mean(0).tolist())):
            kind = ("eos" if tok == EOS else "digit" if tok in task.digit_ids else "hint")
            rows.append({"run": os.path.basename(os.path.normpath(run_dir)), "length": n,
                         "position": k + 1, "kind": kind,
                         "place": k // 2 + 1 if kind == "digit" else "",
                         "acc": round(acc, 4), "exact": round(exact, 4), "step": step})
    return rows


def main(out: str, run_dirs: list[str]) -> None:
    torch.set_num_threads(1)
    rows = [r for d in run_dirs for r in run_rows(d)]
    tmp = out + ".tmp"
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    os.replace(tmp, out)
    print(f"wrote {len(rows)} rows for {len(run_dirs)} runs to {out}")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2:])
