"""What lengen's CPU training paths buy in the recipes' cpu-scale training step, each switched
on and off inside one process. Two sets of arms (``--arms``):

* ``linear`` (default): oneDNN's linear (``lengen/ops/linear``, ``LENGEN_ONEDNN_LINEAR``) and the
  last block's output projection on the kept rows only (the attention kind's ``supports_keep``
  flag; off: the block takes the rows after projecting every token, as before), arms ``neither``, ``onednn``, ``keep``,
  ``both``.
* ``tokens``: the first block's norm and q, k, v projection once per vocabulary entry
  (``lengen/ops/token_rows.py``, ``LENGEN_TOKEN_ROWS``), arms ``neither`` and ``tokens``.

Arms run in turn, ten training steps each on fresh batches (the training loop's own
``forward_loss``, backward, AdamW), for ``--rounds`` rounds: a drift of the machine hits every
arm alike, and the table gives the median over rounds of the base arm's step over each arm's
(``vs_commit.py`` compares whole commits in fresh processes, where this host's spread between
processes is larger than these effects).

    python benchmarks/step_switches.py --model flipflop:FoT --rounds 10 --json out.json
    python benchmarks/step_switches.py --arms tokens --model flipflop:NoPE --rounds 10
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import lengen_revision, machine_info, machine_line  # noqa: E402
from roofline import MODELS, build  # noqa: E402

from lengen.threads import tune_allocator  # noqa: E402
from lengen.train.optim import build_optimizer  # noqa: E402
from lengen.train.step import forward_loss  # noqa: E402

#: --arms -> {arm: (oneDNN linear, kept-rows projection, token rows)}, in the order they run,
#: the first the base. The linear arms run without token rows, as when they were first measured;
#: the tokens arms with the other two on, as training runs.
ARM_SETS = {
    "linear": {"neither": (0, 0, 0), "onednn": (1, 0, 0), "keep": (0, 1, 0), "both": (1, 1, 0)},
    "tokens": {"neither": (1, 1, 0), "tokens": (1, 1, 1)},
}
SWITCHES = ("LENGEN_ONEDNN_LINEAR", "LENGEN_TOKEN_ROWS")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="flipflop:FoT", choices=MODELS, help="recipe:model key")
    ap.add_argument("--rounds", type=int, default=10, help="rounds of every arm (default 10)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    ap.add_argument("--arms", default="linear", choices=ARM_SETS,
                    help="which paths to switch (default linear: oneDNN and the kept rows)")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    tune_allocator()                                   # as lengen.train does for CPU work
    cfg, task, net = build(args.model)
    net.train()
    opt = build_optimizer(net, cfg.train)
    gen = torch.Generator().manual_seed(0)
    kind = type(net.blocks[-1].attn)
    keeps = kind.__dict__.get("supports_keep")          # the kind's own flag, or inherited

    arms = ARM_SETS[args.arms]

    def arm(name):
        onednn, kept, tokens = arms[name]
        os.environ["LENGEN_ONEDNN_LINEAR"] = str(onednn)
        os.environ["LENGEN_TOKEN_ROWS"] = str(tokens)
        kind.supports_keep = bool(kept)

    def steps(n=10):
        t0 = time.perf_counter()
        for _ in range(n):
            b = task.train_batch(cfg.train.batch_size, gen)
            pos = net.sample_positions(b.inputs.shape[1], batch_size=b.inputs.shape[0],
                                       device="cpu", generator=gen, batch=b)
            loss = forward_loss(net, b, pos, cfg.train, torch.device("cpu"),
                                getattr(task, "output_slice", None))
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return (time.perf_counter() - t0) / n

    try:
        for name in arms:                              # warm-up: every arm once
            arm(name)
            steps()
        times = {name: [] for name in arms}
        for _ in range(args.rounds):
            for name in arms:
                arm(name)
                times[name].append(steps())
    finally:
        if keeps is None:
            del kind.supports_keep
        else:
            kind.supports_keep = keeps
        for var in SWITCHES:
            os.environ.pop(var, None)
    rows = [dict(arm=name, ms=1e3 * statistics.median(times[name]),
                 speedup=statistics.median(a / b for a, b in zip(times["neither"], times[name])))
            for name in arms]
    setup = dict(model=args.model, arms=args.arms, rounds=args.rounds, threads=args.threads,
                 lengen=lengen_revision())
    what = ("lengen's oneDNN linear and the kept-rows projection" if args.arms == "linear"
            else "the first block's token rows")
    print(f"Training step with {what} switched on and off in one process; speed-up = median "
          f"over rounds of 'neither' / arm")
    print(", ".join(f"{k}={v}" for k, v in setup.items()))
    print(machine_line(), flush=True)
    print("| arm | ms / step | speed-up |")
    print("|---|---|---|")
    for r in rows:
        print(f"| {r['arm']} | {r['ms']:.1f} | {r['speedup']:.3f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(setup=setup, machine=machine_info(), rows=rows,
                           times={k: v for k, v in times.items()}), f, indent=1)


if __name__ == "__main__":
    main()
