"""The ``lengen bench`` battery: one cell per task family of the four papers, each cell's protocol
written here once, with its source, at three scales.

A *variant* (a set of model overrides, e.g. ``model.posenc=mypkg.pe:Slopes``) is trained and
evaluated on every cell; the cell's base config fixes everything else. A cell gives one row of
the scorecard: whether the model **fitted** its training distribution (the cell's rule; an
unfitted model's out-of-distribution number does not count) and its **OOD score**, in [0, 1],
higher is better, 1 = no loss outside the training distribution.

Cells (``CELLS``), cpu scale (``SCALES["cpu"]``), with every difference from the paper named:

* ``flipflop`` — TRA paper, Table 1 (Liu et al. 2023's flip-flop language): train on p_i = 0.8,
  score whole-sequence accuracy on the IID, sparse (p_i = 0.98) and dense (p_i = 0.1) splits.
  Fitted: IID >= 95%. OOD score: mean of sparse and dense. cpu: 128 tokens (paper 512), 2
  layers x d_model 64 (paper 4 x 256), 1,500 steps at batch 32 (paper 25,000 at 64).
* ``bucket_sort``, ``reverse_string``, ``even_pairs``, ``missing_duplicate`` — Ruoss et al.
  2023, Table 1 (Chomsky hierarchy, encoder, their 5-layer model and Adam, constant lr): train
  on lengths 1..N, score per-token accuracy on N+1..M. Fitted: mean accuracy at the training
  lengths >= 90%. OOD score: mean over the test lengths. cpu: N = 20, M = 100 (paper 40, 500),
  per-task steps and batch from the randomized-pe recipe's cpu probes (paper 2M steps at 128).
  Attention kinds defined only with a causal window (TRA, FoT, CoPE) cannot run here: n/a.
* ``copy``, ``reverse`` — Kazemnejad et al. 2023 as in the index-warping paper (decoder,
  prompt -> answer): train on 2..M items, score exact match (greedy-equivalent teacher forcing)
  on M+1..3M. Fitted: mean at the training lengths >= 90%. OOD score: mean over M+1..3M. cpu:
  M = 10 (paper 20), 2 layers x d_model 64 (paper 12 x 768), 2,000 steps at batch 64.
* ``addition`` — Zhou et al. 2024 (reversed format with index hints, decoder): train on 1..N
  digits, score exact match on N+1..2N. Fitted: mean EM at 1..N >= 95%. OOD score: mean EM over
  N+1..2N. cpu: N = 5 (paper 40), 2 layers x d_model 64 (paper 6 x 512), 3,000 steps at batch 32.
* ``lm`` — TRA paper, App. B (perplexity vs length, 128-token window): score test perplexity
  at 1x, 2x, 4x, 8x the window. Fitted: a finite perplexity at 1x (the scorecard also shows it,
  so a variant far above the others can be read as not fitted). OOD score: ppl(1x) / ppl(8x).
  cpu: the offline KJV corpus (a stand-in for WikiText-103) with a 2,048-id BPE, 2 layers x
  d_model 64 (paper 8 x 512), 800 steps at batch 32 (paper 100k at 64), up to 8x (paper 32x).

``VERSION`` changes whenever a cell's protocol or budget changes; a scorecard row records it, so
rows of different versions are never compared without saying so.
"""
from __future__ import annotations

from lengen.eval.length_sweep import sweep_lengths
from lengen.model.presets import RUOSS2023_ENCODER, RUOSS2023_TRAIN
from lengen.registry import lookup
from lengen.tasks.splits import length_splits

VERSION = 1

CHOMSKY = {  # cell -> task (Ruoss et al. 2023); budgets below are per cell
    "bucket_sort": "bucket_sort", "reverse_string": "reverse_string",
    "even_pairs": "even_pairs", "missing_duplicate": "missing_duplicate_string"}
SEQUENCE = {"copy": "copy", "reverse": "reverse"}

#: cell -> (family, source, the OOD metric's description)
CELLS = {
    "flipflop": ("flip-flop", "TRA paper Table 1", "mean seq. acc. sparse + dense"),
    **{c: ("Chomsky", "Ruoss et al. 2023 Table 1", "mean token acc. N+1..M") for c in CHOMSKY},
    **{c: ("copy / reverse", "index-warping paper Table A", "mean exact match M+1..3M")
       for c in SEQUENCE},
    "addition": ("addition", "Zhou et al. 2024 Fig. 3", "mean exact match N+1..2N digits"),
    "lm": ("language modelling", "TRA paper App. B", "ppl(1x) / ppl(8x)"),
}

SCALES = {
    "smoke": dict(flipflop=dict(n_pairs=8, steps=4, batch_size=8, sequences=16),
                  chomsky=dict(N=4, M=8, stride=2, steps=4, batch_size=8, sequences=8,
                               per_cell={}),
                  sequence=dict(M=3, top=6, steps=4, batch_size=8, sequences=8),
                  addition=dict(N=2, steps=4, batch_size=8, sequences=8, L=64),
                  lm=dict(tokenizer="bytes", tokenizer_kwargs=None, seq_len=16, steps=3,
                          batch_size=8, max_chars=200_000, max_eval_tokens=512),
                  model=dict(d_model=16, n_layers=1, n_heads=2), workers_hint=1),
    "cpu": dict(flipflop=dict(n_pairs=64, steps=1500, batch_size=32, sequences=500),
                chomsky=dict(N=20, M=100, stride=8, steps=1500, batch_size=64, sequences=64,
                             per_cell={"bucket_sort": dict(steps=2000, batch_size=16, lr=1e-3),
                                       "reverse_string": dict(steps=4000, batch_size=16)}),
                sequence=dict(M=10, top=30, steps=2000, batch_size=64, sequences=64),
                addition=dict(N=5, steps=3000, batch_size=32, sequences=100, L=256),
                lm=dict(tokenizer="bpe", tokenizer_kwargs={"vocab_size": 2048}, seq_len=128,
                        steps=800, batch_size=32, max_chars=None, max_eval_tokens=16384),
                model=dict(d_model=64, n_layers=2, n_heads=4), workers_hint=2),
    "paper": dict(flipflop=dict(n_pairs=256, steps=25_000, batch_size=64, sequences=10_000),
                  chomsky=dict(N=40, M=500, stride=1, steps=2_000_000, batch_size=128,
                               sequences=500, per_cell={}),
                  sequence=dict(M=20, top=100, steps=40_000, batch_size=64, sequences=128),
                  addition=dict(N=40, steps=50_000, batch_size=128, sequences=1000, L=2048),
                  lm=dict(tokenizer="gpt2", tokenizer_kwargs=None, seq_len=128,
                          steps=100_000, batch_size=64, max_chars=None,
                          max_eval_tokens=10 ** 9),
                  model=dict(d_model=256, n_layers=4, n_heads=4), workers_hint=1),
}

FLIPFLOP_FIT, CHOMSKY_FIT, SEQUENCE_FIT, ADDITION_FIT = 0.95, 0.90, 0.90, 0.95
LM_MULTIPLES = (1, 2, 4, 8)
EVAL_SEED = 1234


def _decoder(m: dict) -> dict:
    """The decoder block of the flip-flop, sequence, addition and LM cells (pre-norm RMSNorm,
    SwiGLU MLP of width 2 x d_model, as the TRA paper's models; NoPE softmax until a variant
    says otherwise)."""
    return {"d_model": m["d_model"], "n_layers": m["n_layers"], "n_heads": m["n_heads"],
            "d_ff": 2 * m["d_model"], "mlp": "swiglu", "norm": "rms", "norm_position": "pre",
            "dropout": 0.0, "posenc": "nope", "attention": "softmax", "positions": "identity"}


def _adamw(steps: int, batch_size: int, lr: float, seed: int) -> dict:
    return {"steps": steps, "batch_size": batch_size, "lr": lr,
            "warmup_steps": min(100, steps // 10), "schedule": "cosine", "min_lr_frac": 0.1,
            "weight_decay": 0.1, "betas": [0.9, 0.95], "seed": seed, "data_seed": seed,
            "ckpt_every": max(100, steps // 5), "log_every": max(1, min(50, steps // 20))}


def _lengths(lo: int, hi: int, stride: int) -> list[int]:
    return sweep_lengths(lo, hi, stride)


def cell_config(cell: str, scale: str = "cpu", seed: int = 0) -> dict:
    """The base config dict of ``cell`` at ``scale`` (NoPE, softmax, identity positions): a
    variant's overrides are applied on top of it."""
    s = lookup(SCALES, scale, "bench scale")
    lookup(CELLS, cell, "bench cell")
    m = s["model"]
    if cell == "flipflop":
        f = s["flipflop"]
        return {"model": _decoder(m), "task": {"name": "flipflop", "kwargs": {"n_pairs":
                                                                               f["n_pairs"]}},
                "train": _adamw(f["steps"], f["batch_size"], 1e-3, seed),
                "eval": {"splits": ["iid", "sparse", "dense"], "sequences": f["sequences"],
                         "batch_size": min(250, f["sequences"]), "seed": EVAL_SEED}}
    if cell in CHOMSKY:
        c = dict(s["chomsky"], **s["chomsky"]["per_cell"].get(cell, {}))
        seen, test = _lengths(1, c["N"], c["stride"]), _lengths(c["N"] + 1, c["M"], c["stride"])
        model = dict(RUOSS2023_ENCODER, posenc="nope", attention="softmax", positions="identity")
        if scale == "smoke":
            model.update(m)
        train = dict(RUOSS2023_TRAIN, steps=c["steps"], batch_size=c["batch_size"],
                     lr=c.get("lr", 5e-4), seed=seed, data_seed=seed,
                     ckpt_every=max(100, c["steps"] // 5), log_every=50)
        return {"model": model,
                "task": {"name": CHOMSKY[cell], "kwargs": {"max_train_length": c["N"],
                                                           "max_eval_length": c["M"]}},
                "train": train,
                "eval": {"splits": length_splits(seen + test), "sequences": c["sequences"],
                         "batch_size": c["sequences"], "seed": EVAL_SEED}}
    if cell in SEQUENCE:
        q = s["sequence"]
        lengths = sorted(set(_lengths(2, q["top"], max(1, q["M"] // 2))) | {q["M"], q["M"] + 1})
        return {"model": _decoder(m),
                "task": {"name": SEQUENCE[cell], "kwargs": {"min_length": 2,
                                                            "max_train_length": q["M"],
                                                            "max_eval_length": q["top"]}},
                "train": _adamw(q["steps"], q["batch_size"], 1e-3, seed),
                "eval": {"splits": length_splits(lengths), "sequences": q["sequences"],
                         "batch_size": q["sequences"], "seed": EVAL_SEED}}
    if cell == "addition":
        a = s["addition"]
        return {"model": _decoder(m),
                "task": {"name": "addition", "kwargs": {"max_train_length": a["N"],
                                                        "max_eval_length": 2 * a["N"],
                                                        "format": "reversed", "hints": True,
                                                        "hint_start": "random"}},
                "train": _adamw(a["steps"], a["batch_size"], 1e-3, seed),
                "eval": {"splits": length_splits(list(range(1, 2 * a["N"] + 1))),
                         "sequences": a["sequences"], "batch_size": a["sequences"],
                         "seed": EVAL_SEED}}
    lm = s["lm"]
    kw = {"corpus": "kjv", "tokenizer": lm["tokenizer"], "seq_len": lm["seq_len"],
          "eval_lengths": [k * lm["seq_len"] for k in LM_MULTIPLES], "eval_split": "test",
          "max_eval_tokens": lm["max_eval_tokens"]}
    if lm["tokenizer_kwargs"]:
        kw["tokenizer_kwargs"] = dict(lm["tokenizer_kwargs"])
    if lm["max_chars"]:
        kw["max_chars"] = lm["max_chars"]
    return {"model": _decoder(m), "task": {"name": "text", "kwargs": kw},
            "train": _adamw(lm["steps"], lm["batch_size"], 2e-3, seed),
            "eval": {"sequences": 10 ** 9, "batch_size": 64, "seed": EVAL_SEED}}


# ---- scoring ----------------------------------------------------------------------------------

def _by_length(rows, metric):
    """{K: value} of the ``len=K`` splits (K in the task's own unit: items, digits, symbols;
    a row's ``length`` column may count model tokens instead)."""
    return {int(str(r["split"])[4:]): float(r["value"]) for r in rows
            if r.get("metric") == metric and str(r.get("split", "")).startswith("len=")}


def _mean(xs):
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")


def score(cell: str, scale: str, rows: list[dict]) -> dict:
    """``{fitted, seen, ood}`` of a cell from its run's evaluation rows: ``seen`` is the
    in-distribution figure the fit rule reads, ``ood`` the cell's OOD score (see the module
    docstring); both in [0, 1] except ``seen`` of ``lm`` (the perplexity at 1x)."""
    s = SCALES[scale]
    if cell == "flipflop":
        acc = {r["split"]: float(r["value"]) for r in rows if r.get("metric") == "seq_acc"}
        seen = acc.get("iid", float("nan"))
        return {"fitted": seen >= FLIPFLOP_FIT, "seen": seen,
                "ood": _mean([acc.get("sparse", float("nan")), acc.get("dense", float("nan"))])}
    if cell in CHOMSKY:
        c = s["chomsky"]
        acc = _by_length(rows, "token_acc")
        seen = _mean(v for k, v in acc.items() if k <= c["N"])
        return {"fitted": seen >= CHOMSKY_FIT, "seen": seen,
                "ood": _mean(v for k, v in acc.items() if k > c["N"])}
    if cell in SEQUENCE or cell == "addition":
        N = s["sequence"]["M"] if cell in SEQUENCE else s["addition"]["N"]
        acc = _by_length(rows, "seq_acc")
        seen = _mean(v for k, v in acc.items() if k <= N)
        rule = SEQUENCE_FIT if cell in SEQUENCE else ADDITION_FIT
        return {"fitted": seen >= rule, "seen": seen,
                "ood": _mean(v for k, v in acc.items() if k > N)}
    ppl = {}
    for r in rows:
        if r.get("metric") == "ppl":
            ppl[int(r["length"])] = float(r["value"])
    base = s["lm"]["seq_len"]
    one, eight = ppl.get(base, float("nan")), ppl.get(8 * base, float("nan"))
    return {"fitted": one == one and one < float("inf"), "seen": one, "ood": one / eight}


__all__ = ["VERSION", "CELLS", "SCALES", "cell_config", "score"]
