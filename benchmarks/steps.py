"""Training-step time, one harness: models x named arms, interleaved in one process.

Every (model, arm) case steps in turn, ``--steps`` training steps per round, for ``--rounds``
rounds after one untimed round: a drift of the shared machine hits every case alike, and each
ratio is the median over rounds of the per-round ratio. Replaces step_time.py (every attention
kind x scheme against SDPA NoPE), fused_steps.py (the fused-rows C kernel on and off),
step_switches.py (oneDNN linear, kept rows, token rows switched on and off), mixers.py (the
token mixers, with ``--eval`` for their evaluation forward) and xl_tiles.py (the forms
Transformer-XL's bias reaches the tiled ops in).

Models (``--models``, comma-separated):

* ``ATTENTION:POSENC`` -- the grid model: d_model 64, 2 layers, 4 heads, SwiGLU, vocabulary 8,
  batch 8, T = 512 (``--T --batch --d-model --layers --heads``), random tokens, cross-entropy
  on every token, AdamW. ``*`` expands from the registries (``*:nope``, ``softmax:*``, ``*:*``).
* ``ATTENTION+ssmax:POSENC`` / ``ATTENTION+llama4:POSENC`` -- the grid model with
  log-length query scaling (``attention_kwargs.logn``; :mod:`lengen.attention.scaling`).
  ``*`` leaves out the pairs the config refuses (PoPE's wide q/k with CoPE, Diff or PaTH).
* ``sdpa`` -- the grid model with softmax attention, NoPE and ``attn_impl='lean'``: plain
  ``F.scaled_dot_product_attention``, the baseline of every grid ratio.
* ``RECIPE:MODEL`` -- a recipe's cpu-scale model (the keys of ``roofline.MODELS``, e.g.
  ``flipflop:FoT``, ``addition:fire``, ``copy:rope``): its own task batches through the training
  loop's ``forward_loss``, backward and the training optimizer.

Arms (``--arms``, comma-separated; ``+`` combines switches, e.g. ``no-onednn+no-keep``):

* ``default`` -- lengen's own path selection;
* ``no-fused`` -- ``LENGEN_FUSED_ROWS=0`` (the tiled ops instead of the per-row C kernel);
* ``no-onednn`` -- ``LENGEN_ONEDNN_LINEAR=0`` (``F.linear`` instead of oneDNN's matmul);
* ``no-tokens`` -- ``LENGEN_TOKEN_ROWS=0`` (no first-block token rows);
* ``no-keep`` -- the last block projects every token before taking the kept rows;
* ``naive`` / ``lean`` -- the model built with that ``attn_impl`` (grid models; ``naive`` runs
  the token mixers' token-by-token reference recurrences);
* ``xl-toeplitz`` / ``xl-lowrank`` / ``xl-dense`` -- the form Transformer-XL's bias reaches the
  tiled CPU ops in (``ATTENTION:xl`` grid models; ``lengen.ops.tile_bias``): ``posenc_kwargs.path
  = 'table'`` (each tile scores its rows against its window of the table of projected
  distances; evenly stepped positions only), ``'trig'`` (the trig identity's low-rank factor,
  one matmul per tile; any positions shared by the batch), or the dense ``[B, H, T, T]`` bias
  from the hook (no tiled form); without one of them, ``path='auto'``;
* ``randomized`` -- the grid model with Ruoss et al.'s randomized positions (a sorted subset of
  [0, 4T) drawn per batch; the draw is re-seeded every step so every case sees the same).

The ``sdpa`` baseline ignores the build switches (it is always lean SDPA with NoPE).

Presets for ``--arms`` (the arm sets of the scripts this replaces): ``fused`` = default, no-fused;
``linear`` = neither, onednn, keep, both (step_switches.py's; token rows off in all four);
``tokens`` = neither, tokens; ``xl`` = auto, toeplitz, lowrank, dense (identity positions) and
rand-auto, rand-lowrank, rand-dense (randomized positions) (xl_tiles.py's forms).

``--eval`` also times an evaluation forward (``model.eval()``, no grad) of every grid case in
each round, right after its training steps, with its own ratio to the first case.

    python benchmarks/steps.py --models 'sdpa,*:nope,softmax:*' --threads 1              # step_time --quick
    python benchmarks/steps.py --models 'sdpa,*:*' --threads 1 --rounds 5                 # step_time
    python benchmarks/steps.py --models sdpa,tra:xl,cope:xl --arms fused --rounds 7       # fused_steps
    python benchmarks/steps.py --models flipflop:FoT --arms linear --steps 10 --rounds 10  # step_switches
    python benchmarks/steps.py --models flipflop:NoPE --arms tokens --steps 10 --rounds 10
    python benchmarks/steps.py --models sdpa,lstm:nope,mamba2:nope,gated_deltanet:nope \
        --arms default,naive --eval                                                       # mixers
    python benchmarks/steps.py --models sdpa,softmax:xl,tra:xl,cope:xl --arms xl          # xl_tiles
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import lengen_revision, machine_info, machine_line  # noqa: E402

#: switch -> (environment variable, value) or a patch; an arm is a set of switches
ENV_SWITCHES = {"no-fused": ("LENGEN_FUSED_ROWS", "0"), "no-onednn": ("LENGEN_ONEDNN_LINEAR", "0"),
                "no-tokens": ("LENGEN_TOKEN_ROWS", "0")}
PATCH_SWITCHES = ("no-keep",)
IMPL_SWITCHES = ("naive", "lean")
#: switch -> Transformer-XL's ``path`` (``xl-dense``: the default path, its tiled form removed)
XL_SWITCHES = {"xl-toeplitz": "table", "xl-lowrank": "trig", "xl-dense": "auto"}
SWITCHES = (("default",) + tuple(ENV_SWITCHES) + PATCH_SWITCHES + IMPL_SWITCHES
            + tuple(XL_SWITCHES) + ("randomized",))
#: --arms presets: {arm label: switches}
PRESETS = {
    "fused": {"default": "default", "no-fused": "no-fused"},
    "linear": {"neither": "no-onednn+no-keep+no-tokens", "onednn": "no-keep+no-tokens",
               "keep": "no-onednn+no-tokens", "both": "no-tokens"},
    "tokens": {"neither": "no-tokens", "tokens": "default"},
    "xl": {"auto": "default", "toeplitz": "xl-toeplitz", "lowrank": "xl-lowrank",
           "dense": "xl-dense", "rand-auto": "randomized", "rand-lowrank": "randomized+xl-lowrank",
           "rand-dense": "randomized+xl-dense"},
}


def parse_arms(text: str) -> dict[str, frozenset]:
    labels = PRESETS.get(text) or {a: a for a in text.split(",") if a}
    arms = {}
    for label, spec in labels.items():
        parts = frozenset(p for p in spec.split("+") if p != "default")
        unknown = sorted(p for p in parts if p not in SWITCHES)
        if unknown:
            raise SystemExit(f"--arms: unknown switch {unknown[0]!r}; valid: {', '.join(SWITCHES)} "
                             f"(combine with +) or a preset: {', '.join(PRESETS)}")
        if len(parts & set(XL_SWITCHES)) > 1:
            raise SystemExit(f"--arms: {label!r} combines {' and '.join(sorted(parts & set(XL_SWITCHES)))}"
                             f"; an arm takes at most one of {', '.join(XL_SWITCHES)}")
        arms[label] = parts
    return arms


def parse_models(text: str) -> list[str]:
    from lengen.attention import ATTENTIONS
    from lengen.posenc import POSENCS
    from roofline import MODELS

    out = []
    for m in (x for x in text.split(",") if x):
        if m == "sdpa" or m in MODELS:
            out.append(m)
            continue
        if m.count(":") != 1:
            raise SystemExit(f"--models: {m!r} is not sdpa, ATTENTION:POSENC or one of "
                             f"{', '.join(MODELS)}")
        a, p = m.split(":")
        kinds = list(ATTENTIONS) if a == "*" else [a]
        schemes = list(POSENCS) if p == "*" else [p]
        for k in kinds:
            for s in schemes:
                kind, _, logn = k.partition("+")
                if kind not in ATTENTIONS or s not in POSENCS or logn not in ("", *LOGN):
                    raise SystemExit(f"--models: {k}:{s}: attention kinds {', '.join(ATTENTIONS)} "
                                     f"(+{' or +'.join(LOGN)} for log-length scaling); schemes "
                                     f"{', '.join(POSENCS)}; recipe models {', '.join(MODELS)}")
                why = refusal(kind, s, logn)
                if why and "*" in m:
                    continue                      # a pair the config refuses (PoPE with CoPE ...)
                if why:
                    raise SystemExit(f"--models: {k}:{s}: {why}")
                if f"{k}:{s}" not in out:
                    out.append(f"{k}:{s}")
    return out


#: ``KIND+NAME`` grid models: the kind with ``attention_kwargs.logn=NAME`` (log-length scaling)
LOGN = ("ssmax", "llama4")


def grid_config(kind: str, posenc: str, logn: str, impl: str, args=None, switches=frozenset()):
    from lengen.model import ModelConfig

    size = {} if args is None else dict(d_model=args.d_model, n_layers=args.layers,
                                        n_heads=args.heads)
    xl = [XL_SWITCHES[s] for s in switches if s in XL_SWITCHES]
    if xl:
        if posenc != "xl":
            raise ValueError(f"arm switches {', '.join(XL_SWITCHES)} are for ATTENTION:xl "
                             f"models, not posenc {posenc!r}")
        size["posenc_kwargs"] = {"path": xl[0]}
    if "randomized" in switches:
        size.update(positions="randomized", positions_kwargs={"max_length": 4 * args.T})
    return ModelConfig(vocab_size=8, attention=kind, posenc=posenc, attn_impl=impl,
                       attention_kwargs={"logn": logn} if logn else {}, **size)


def refusal(kind: str, posenc: str, logn: str) -> str | None:
    """Why the config refuses this pair (e.g. PoPE's wide q/k with CoPE), or None."""
    from lengen.errors import ConfigError
    from lengen.model import Transformer

    try:
        cfg = grid_config(kind, posenc, logn, "auto")
        cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.d_ff = 8, 1, 2, 8       # a tiny build
        Transformer(cfg)
    except (ConfigError, ValueError) as e:
        return str(e).splitlines()[0]
    return None


class Case:
    """One model under one arm: its own model and optimizer (same seed for every arm), and a
    ``step()`` that runs ``n`` training steps with the arm's switches set."""

    def __init__(self, model: str, switches: frozenset, args):
        self.switches = switches
        impl = next((s for s in switches if s in IMPL_SWITCHES), None)
        torch.manual_seed(0)
        from roofline import MODELS
        if model in MODELS:
            self._recipe(model, impl)
        else:
            self._grid(model, impl, args)

    def _grid(self, model, impl, args):
        from lengen.model import ModelConfig, Transformer

        attention, posenc = ("softmax", "nope") if model == "sdpa" else model.split(":")
        impl = "lean" if model == "sdpa" else (impl or "auto")
        built = frozenset() if model == "sdpa" else self.switches
        kind, _, logn = attention.partition("+")
        net = Transformer(grid_config(kind, posenc, logn, impl, args, built))
        if "xl-dense" in built:              # no tiled form: the ops read the dense hook's bias
            from lengen.posenc.xl import TransformerXLRelative
            for m in net.modules():
                if isinstance(m, TransformerXLRelative):
                    m.tiled_bias = lambda *a: None
        reseed = "randomized" in built
        net.check_length(args.T)
        net.train()
        opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
        g = torch.Generator().manual_seed(0)
        x = torch.randint(0, 8, (args.batch, args.T), generator=g)
        y = torch.randint(0, 8, (args.batch, args.T), generator=g)

        def one():
            if reseed:                       # the same randomized positions in every case and step
                torch.manual_seed(1)
            out = net(x)
            logits = out if torch.is_tensor(out) else out.logits
            loss = F.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        def forward():
            net.eval()
            try:
                with torch.no_grad():
                    net(x)
            finally:
                net.train()
        self.one, self.forward, self.net = one, forward, net
        self.last_attn = net.blocks[-1].attn

    def _recipe(self, model, impl):
        from roofline import build

        from lengen.train.optim import build_optimizer
        from lengen.train.step import forward_loss

        if impl or self.switches & (set(XL_SWITCHES) | {"randomized"}):
            raise SystemExit(f"arms naive / lean / {' / '.join(XL_SWITCHES)} / randomized are for "
                             f"grid models, not {model}")
        cfg, task, net = build(model)
        net.train()
        opt = build_optimizer(net, cfg.train)
        gen = torch.Generator().manual_seed(0)
        out_slice = getattr(task, "output_slice", None)

        def one():
            b = task.train_batch(cfg.train.batch_size, gen)
            pos = net.sample_positions(b.inputs.shape[1], batch_size=b.inputs.shape[0],
                                       device="cpu", generator=gen, batch=b)
            loss = forward_loss(net, b, pos, cfg.train, torch.device("cpu"), out_slice)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        self.one, self.forward = one, None
        self.last_attn = net.blocks[-1].attn

    def step(self, n: int) -> float:
        """Seconds per training step, ``n`` steps under the arm's switches."""
        return self._timed(self.one, n)

    def eval_forward(self) -> float:
        """Seconds of one evaluation forward (no grad) under the arm's switches."""
        return self._timed(self.forward, 1)

    def _timed(self, fn, n: int) -> float:
        saved = {var: os.environ.get(var) for var, _ in ENV_SWITCHES.values()}
        try:
            for s in self.switches:
                if s in ENV_SWITCHES:
                    os.environ[ENV_SWITCHES[s][0]] = ENV_SWITCHES[s][1]
            if "no-keep" in self.switches:
                # this layer's flag only (lengen.ops.rows.RowPlan.handled_by reads the module):
                # the block takes the kept rows from its output
                self.last_attn.supports_keep = False
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            return (time.perf_counter() - t0) / n
        finally:
            self.last_attn.__dict__.pop("supports_keep", None)
            for var, value in saved.items():
                if value is None:
                    os.environ.pop(var, None)
                else:
                    os.environ[var] = value


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--models", default="sdpa,*:nope", help="comma-separated models (see below)")
    ap.add_argument("--arms", default="default", help="comma-separated arms or a preset")
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    ap.add_argument("--steps", type=int, default=1, help="training steps per case per round")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    ap.add_argument("--T", type=int, default=512)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--d-model", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--eval", action="store_true",
                    help="also time an evaluation forward (no grad) per case and round")
    ap.add_argument("--json", help="also write setup, machine, rows and every time here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from lengen.threads import tune_allocator
    tune_allocator()                                   # as lengen.train does for CPU work

    models, arms = parse_models(args.models), parse_arms(args.arms)
    from roofline import MODELS
    if args.eval and any(m in MODELS for m in models):
        raise SystemExit("--eval times grid models only (sdpa, ATTENTION:POSENC), not "
                         f"{', '.join(m for m in models if m in MODELS)}")
    cases, errors = {}, {}
    for m in models:
        for label, switches in arms.items():
            try:
                cases[m, label] = c = Case(m, switches, args)
                c.step(args.steps)                     # untimed: first-call costs, kernel builds
                if args.eval:
                    c.eval_forward()
            except SystemExit:
                raise
            except Exception as e:  # a combination that cannot be built or run is reported
                cases.pop((m, label), None)
                errors[m, label] = f"{type(e).__name__}: {e}"
    if not cases:
        raise SystemExit(f"no case ran: {errors}")
    times = {k: [] for k in cases}
    eval_times = {k: [] for k in cases}
    for _ in range(args.rounds):
        for k, c in cases.items():                     # interleaved: every case once per round
            times[k].append(c.step(args.steps))
            if args.eval:
                eval_times[k].append(c.eval_forward())
    base = next(iter(cases))                           # the first model under the first arm
    first_arm = next(iter(arms))
    rows = []
    for m in models:
        for label in arms:
            k = (m, label)
            if k in errors:
                rows.append(dict(model=m, arm=label, error=errors[k]))
                continue
            t = times[k]
            row = dict(model=m, arm=label, ms=1e3 * statistics.median(t),
                       vs_base=statistics.median(a / b for a, b in zip(t, times[base])))
            if (m, first_arm) in times:
                row["speedup_vs_first_arm"] = statistics.median(
                    a / b for a, b in zip(times[m, first_arm], t))
            if args.eval:
                e = eval_times[k]
                row.update(eval_ms=1e3 * statistics.median(e), eval_vs_base=statistics.median(
                    a / b for a, b in zip(e, eval_times[base])))
            rows.append(row)
    setup = dict(models=args.models, arms=args.arms, rounds=args.rounds, steps=args.steps,
                 threads=args.threads, T=args.T, batch=args.batch, d_model=args.d_model,
                 layers=args.layers, heads=args.heads, eval=args.eval, lengen=lengen_revision())
    print(f"training step per case; vs {base[0]}/{base[1]} = median over rounds of (step / "
          f"that step, same round); speed-up = median of ({first_arm} step / arm step)")
    print(", ".join(f"{k}={v}" for k, v in setup.items()))
    print(machine_line(), flush=True)
    vs = f"vs {base[0]}/{base[1]}"
    ev = f" eval ms | eval {vs} |" if args.eval else ""
    print(f"| model | arm | ms / step | {vs} | speed-up vs {first_arm} |{ev}")
    print("|---|---|---|---|---|" + ("---|---|" if args.eval else ""))
    for r in rows:
        if "error" in r:
            print(f"| {r['model']} | {r['arm']} | n/a | {r['error'][:70]} | |" + (" | |" if args.eval else ""))
        else:
            ev = f" {r['eval_ms']:.1f} | {r['eval_vs_base']:.2f} |" if args.eval else ""
            print(f"| {r['model']} | {r['arm']} | {r['ms']:.1f} | {r['vs_base']:.2f} | "
                  f"{r.get('speedup_vs_first_arm', float('nan')):.3f} |{ev}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(setup=setup, machine=machine_info(), rows=rows,
                           times={f"{m}/{a}": t for (m, a), t in times.items()},
                           **({"eval_times": {f"{m}/{a}": t for (m, a), t in eval_times.items()}}
                              if args.eval else {})), f, indent=1)
    return rows


if __name__ == "__main__":
    main()
