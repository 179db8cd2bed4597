"""Training step time of Transformer-XL models by the form its bias reaches the tiled CPU ops in,
as ratios to plain softmax attention (SDPA) with NoPE measured in the same round.

Forms (``lengen.ops.tile_bias``): ``toeplitz`` (``path='table'``: each tile scores its rows
against its window of the table of projected distances; evenly stepped positions only),
``lowrank`` (``path='trig'``: the trig identity's ``[B, H, T, d_rel]`` factor times constant key
features, one matmul per tile; any positions shared by the batch), ``dense`` (the dense
``[B, H, T, T]`` bias from the hook, what the ops read before they had a tiled form for these
positions) and ``auto`` (the default ``path``: what a user gets). Positions: ``identity`` and
``randomized`` (Ruoss et al.'s sorted subset of [0, L), drawn once per batch, the randomized-PE
recipe's ``rand_relative`` model; the draw is re-seeded each step so every form sees the same).

A step is forward + cross-entropy + backward + AdamW on random tokens. Repeats are interleaved
(one step of every case per round), each ratio is taken against the baseline of the same round,
the median over rounds is reported.

    python benchmarks/xl_tiles.py --threads 1
    python benchmarks/xl_tiles.py --threads 1 --d-model 128 --heads 2 --kinds cope softmax
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

from lengen.model import ModelConfig, Transformer
from lengen.posenc.xl import TransformerXLRelative

try:                                     # run as a script from the repository root
    from _common import lengen_revision, machine_info, machine_line
except ImportError:                      # pragma: no cover
    from benchmarks._common import lengen_revision, machine_info, machine_line

FORMS = {"auto": "auto", "toeplitz": "table", "lowrank": "trig", "dense": "auto"}
POSITIONS = ("identity", "randomized")


def build(kind, posenc, positions, form, args):
    torch.manual_seed(0)
    kw = {}
    if posenc == "xl":
        kw = dict(posenc_kwargs={"path": FORMS[form]})
        if positions == "randomized":
            kw.update(positions="randomized", positions_kwargs={"max_length": 4 * args.T})
    if posenc == "nope":                 # the baseline: through SDPA ('auto' would take the
        kw = dict(attn_impl="lean")      # fused-rows C kernel at small head dims)
    model = Transformer(ModelConfig(vocab_size=8, d_model=args.d_model, n_layers=args.layers,
                                    n_heads=args.heads, attention=kind, posenc=posenc, **kw))
    if form == "dense":                  # no tiled form: the ops read the dense hook's bias
        for m in model.modules():
            if isinstance(m, TransformerXLRelative):
                m.tiled_bias = lambda *a: None
    model.train()
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4)


def cases(args):
    out = [("softmax", "nope", "identity", "-")]
    for kind in args.kinds:
        for positions in POSITIONS:
            for form in FORMS:
                if positions == "randomized" and form == "toeplitz":
                    continue                      # table + randomized positions = the dense hook
                out.append((kind, "xl", positions, form))
    return out


def step(model, opt, tokens, targets):
    torch.manual_seed(1)                 # the same randomized positions in every case and step
    loss = F.cross_entropy(model(tokens).flatten(0, 1).float(), targets.flatten())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kinds", nargs="+", default=["softmax", "tra", "cope"],
                    help="attention kinds (default: softmax tra cope)")
    ap.add_argument("--T", type=int, default=512, help="sequence length (default 512)")
    ap.add_argument("--batch", type=int, default=8, help="batch size (default 8)")
    ap.add_argument("--d-model", type=int, default=64, help="model width (default 64)")
    ap.add_argument("--layers", type=int, default=2, help="blocks (default 2)")
    ap.add_argument("--heads", type=int, default=4, help="heads (default 4: head dim 16)")
    ap.add_argument("--repeats", type=int, default=5, help="timed rounds (default 5)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps per case (default 2)")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 8, (args.batch, args.T), generator=g)
    targets = torch.randint(0, 8, (args.batch, args.T), generator=g)
    models = {c: build(*c, args) for c in cases(args)}
    for m in models.values():
        for _ in range(args.warmup):
            step(*m, tokens, targets)
    times = {c: [] for c in models}
    for _ in range(args.repeats):
        for c, m in models.items():            # interleaved: one step of each per round
            t0 = time.perf_counter()
            step(*m, tokens, targets)
            times[c].append(time.perf_counter() - t0)
    base = times[cases(args)[0]]
    rows = [dict(attention=c[0], posenc=c[1], positions=c[2], form=c[3],
                 ms=1e3 * statistics.median(t),
                 ratio=statistics.median([a / b for a, b in zip(t, base)]))
            for c, t in times.items()]
    setup = dict(T=args.T, batch=args.batch, d_model=args.d_model, layers=args.layers,
                 heads=args.heads, repeats=args.repeats, threads=torch.get_num_threads(),
                 lengen=lengen_revision())
    print("step time, fwd+bwd+AdamW; ratio = median over rounds of "
          "(step / softmax+nope step, same round)")
    print(", ".join(f"{k}={v}" for k, v in setup.items()))
    print(machine_line(), flush=True)
    print(f"{'attention':<10} {'posenc':<6} {'positions':<11} {'form':<9} {'ms':>8} {'ratio':>6}")
    for r in rows:
        print(f"{r['attention']:<10} {r['posenc']:<6} {r['positions']:<11} {r['form']:<9} "
              f"{r['ms']:8.1f} {r['ratio']:6.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(setup=setup, machine=machine_info(), rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
