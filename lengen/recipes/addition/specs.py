"""Settings, scales and run configs of ``lengen reproduce addition`` (builds configs, never
trains; the protocol is described in :mod:`.recipe`).

* ``SETTINGS``: setting -> {posenc, positions, hints, format, spaces, label}: the four PEs with
  index hints (Figs. 3/4), without hints (Fig. 4), in the standard format (Fig. 5), with random
  spaces (Fig. 7), with randomized positions toggled (Fig. 8: FIRE without, KerpleLog and RoPE
  with), and beyond the paper position coupling and Abacus;
* ``FIGURES``: each figure and the settings it compares; ``ERROR_SETTINGS``: the settings whose
  runs get the greedy-decoding error analysis;
* ``SCALES``: sizes, steps, trial counts and evaluation budgets per scale (``smoke``, ``cpu``,
  ``gpu``, ``paper``); the protocol is the same at every scale;
* :func:`run_config` (one run's config dict), :func:`build_specs` (the sweep's RunSpecs: settings
  x trials, FIRE at other training lengths, FIRE on the init x data-order grid) and
  :func:`caption` (the scale restated under every table).
"""
from __future__ import annotations

from lengen.eval.length_sweep import sweep_lengths
from lengen.model.presets import ZHOU2024_BLOCK, ZHOU2024_SIZES, ZHOU2024_TRAIN
from lengen.recipes.common import default_device, select, train_section
from lengen.registry import lookup
from lengen.sweep import RunSpec
from lengen.tasks.splits import length_splits

PES = ("fire", "kerple_log", "rope", "nope")
PE_LABELS = {"fire": "FIRE", "kerple_log": "KerpleLog", "rope": "RoPE", "nope": "NoPE"}


def _settings() -> dict[str, dict]:
    out = {}
    for pe in PES:
        randomized = pe == "fire"          # the paper's recipe is randomized FIRE
        base = dict(posenc=pe, positions="randomized" if randomized else "identity",
                    hints=True, format="reversed", spaces=False, label=PE_LABELS[pe])
        out[pe] = base
        out[f"{pe}-nohints"] = dict(base, hints=False, label=f"{PE_LABELS[pe]}, no hints")
        out[f"{pe}-standard"] = dict(base, format="standard",
                                     label=f"{PE_LABELS[pe]}, standard format")
        out[f"{pe}-spaces"] = dict(base, spaces=True, label=f"{PE_LABELS[pe]}, random spaces")
        if pe != "nope":                   # NoPE has no positions to randomize
            key = f"{pe}-norand" if randomized else f"{pe}-rand"
            out[key] = dict(base, positions="identity" if randomized else "randomized",
                            label=f"{PE_LABELS[pe]}, {'no ' if randomized else ''}"
                                  f"randomized positions")
    for name, label in (("coupling", "Position coupling"), ("abacus", "Abacus")):
        out[name] = dict(posenc="learned", positions=name, hints=False, format="reversed",
                         spaces=False, label=label)
    return out


#: setting -> {posenc, positions, hints, format, spaces, label}
SETTINGS = _settings()

#: the figures and the settings each compares
FIGURES = {
    "fig3": list(PES),
    "fig4": [s for pe in PES for s in (pe, f"{pe}-nohints")],
    "fig5": [s for pe in PES for s in (pe, f"{pe}-standard")],
    "fig7": [s for pe in PES for s in (pe, f"{pe}-spaces")],
    "fig8": ["fire", "fire-norand", "kerple_log", "kerple_log-rand", "rope", "rope-rand"],
    "beyond": ["fire", "coupling", "abacus"],
}
#: settings whose runs get the greedy-decoding error analysis (Figs. 9, C.10)
ERROR_SETTINGS = (*PES, "coupling", "abacus")

SCALES = {
    "smoke": dict(N=3, M=5, test_stride=1, steps=3, batch_size=8, lr=1e-3, warmup_steps=1,
                  model=dict(d_model=16, n_layers=1, n_heads=2, d_ff=32), preset=None,
                  settings=("fire", "rope", "fire-nohints", "fire-standard", "fire-spaces",
                            "fire-norand", "coupling", "abacus"),
                  trials=(0,), train_lengths=(2, 3), train_length_trials=(0,),
                  heatmap=((0, 1), (0, 1)), eval_sequences=4, eval_batch_size=4, eval_every=2,
                  track=(2, 5), track_sequences=4, error_lengths=(4, 5), error_sequences=4,
                  L=128, spaces=0.3, ckpt_every=0),
    # the budget the Fig. 3 search found (results/addition-fig3-search: 8,000 steps at batch
    # 128, the same small model): FIRE fits 1..10 digits at lr 3e-3 on about half its seeds,
    # KerpleLog at lr 1e-3 likewise; RoPE and NoPE fitted at no budget of that search (0 of 10
    # and 0 of 8 finished runs) and run at its last lr, 1e-3, so that Fig. 3 has its four PEs
    # on the same seeds; position coupling stalled at 3e-3 and learns at 1e-3, more slowly
    # (results/addition-cpu-seeds: 12,000 steps), and Abacus, never searched at this budget,
    # takes coupling's lr. FIRE's four ablations take FIRE's budget. Three init seeds per
    # setting, the same on every arm (claims are means over the seeds where both arms pass);
    # FIRE at N = 20 (Fig. 13) and the init x data-order grid (Fig. 11) only on request: the
    # default grid is 30 runs, about 4 hours on 2 cores with --workers 2 (--estimate times
    # it here), to be run in three parts of under 2 hours (--part 1/3, 2/3, 3/3: one init seed
    # each), every part's report covering all finished runs
    "cpu": dict(N=10, M=20, test_stride=1, steps=8000, batch_size=128, lr=3e-3,
                warmup_steps=100, model=dict(d_model=64, n_layers=2, n_heads=4, d_ff=256),
                preset=None,
                settings=("fire", "kerple_log", "rope", "nope", "fire-nohints", "fire-standard",
                          "fire-norand", "fire-spaces", "coupling", "abacus"),
                per_setting={"kerple_log": dict(lr=1e-3), "rope": dict(lr=1e-3),
                             "nope": dict(lr=1e-3), "coupling": dict(lr=1e-3, steps=12000),
                             "abacus": dict(lr=1e-3)},
                trials=(0, 1, 2), train_lengths=(20,), train_length_trials=(0, 1),
                train_lengths_default=False, heatmap=((0, 1), (0, 1)), heatmap_default=False,
                eval_sequences=100, eval_batch_size=100, eval_every=500, track=(12, 15, 20),
                track_sequences=64, error_lengths=(12, 15), error_sequences=100, L=256,
                spaces=0.2, ckpt_every=1000),
    # the first cpu scale (results/addition-cpu, addition-cpu-seeds' first table): batch 32 at
    # lr 3e-3 for 5,000 steps (probes, results/addition-cpu/probes.jsonl, had FIRE fit 1..10
    # digits by step 3,500 this way); FIRE then fitted on 1 of 3 seeds and no ablation on any,
    # so its claims are mostly untested; kept for those tables and as the benchmarks' addition
    # model (benchmarks/vs_commit.py)
    "cpu-5k": dict(N=10, M=20, test_stride=1, steps=5000, batch_size=32, lr=3e-3,
                   warmup_steps=100, model=dict(d_model=64, n_layers=2, n_heads=4, d_ff=256),
                   preset=None, settings=tuple(SETTINGS), trials=(0,), pe_trials=(0, 1),
                   train_lengths=(5, 10),
                   train_length_trials=(0,), heatmap=((0, 1), (0, 1)), eval_sequences=100,
                   eval_batch_size=100, eval_every=500, track=(12, 15, 20), track_sequences=64,
                   error_lengths=(12, 15), error_sequences=100, L=256, spaces=0.2,
                   ckpt_every=1000),
    # the paper's own 5M model (App. B.2: 4 blocks x 256) on one GPU, the sweep's workers sharing
    # it: train 1..10 as the cpu scale does, test every other length to 50 so FIRE trained on
    # 1..20 (Fig. 13's question: does the reach grow with N?) could show 2.5x; bf16 autocast;
    # three trials for the four PEs with hints (Fig. 3), two for every ablation (means over the
    # same seeds on both arms); 4,000 steps so that 14 runs sharing an H100 end inside one
    # 10-minute device call (results/addition-gpu)
    "gpu": dict(N=10, M=50, test_stride=2, steps=4000, batch_size=128, lr=1e-3,
                warmup_steps=300, model={}, preset="5m", precision="bf16",
                settings=tuple(SETTINGS), trials=(0, 1), pe_trials=(0, 1, 2),
                train_lengths=(20,), train_length_trials=(0, 1), heatmap=((0,), (0,)),
                eval_sequences=100, eval_batch_size=100, eval_every=500,
                track=(5, 10, 15, 20, 30, 40), track_sequences=64, error_lengths=(15, 25),
                error_sequences=100, L=640, spaces=0.2, ckpt_every=0),
    "paper": dict(N=40, M=100, test_stride=1, steps=ZHOU2024_TRAIN["steps"],
                  batch_size=ZHOU2024_TRAIN["batch_size"], lr=ZHOU2024_TRAIN["lr"],
                  warmup_steps=ZHOU2024_TRAIN["warmup_steps"], model={}, preset="25m",
                  settings=tuple(SETTINGS), trials=tuple(range(10)),
                  train_lengths=(10, 20, 30, 40), train_length_trials=tuple(range(5)),
                  heatmap=((0, 1, 2), (0, 1, 2, 3, 4)), eval_sequences=1000,
                  eval_batch_size=100, eval_every=1000, track=(30, 50, 70, 90),
                  track_sequences=100, error_lengths=(100,), error_sequences=1000, L=2048,
                  spaces=0.2, ckpt_every=5000),
}
EVAL_SEED = 1234


# ---- configs ------------------------------------------------------------------------------------
def max_test_length(scale: str, N: int | None = None) -> int:
    """The longest test length of a run trained on 1..N digits: the scale's M, and for FIRE at
    another training length (Fig. 13) at least 2N, so that N = 20 at the cpu scale (M = 20) is
    tested beyond its training lengths too."""
    s = SCALES[scale]
    return s["M"] if N is None or N == s["N"] else max(s["M"], 2 * int(N))


def eval_lengths(scale: str, N: int | None = None) -> list[int]:
    s = SCALES[scale]
    return sweep_lengths(1, max_test_length(scale, N), s["test_stride"])


def run_name(setting: str, seed: int, data_seed: int, N: int | None = None) -> str:
    return f"{setting}{'' if N is None else f'-N{N}'}-s{seed}-d{data_seed}"


def run_config(setting: str, scale: str = "cpu", seed: int = 0, data_seed: int = 0,
               N: int | None = None, *, device: str = "cpu", name: str | None = None) -> dict:
    """Config dict of one run: ``setting`` (a key of ``SETTINGS``) at ``scale``, initialisation
    seed ``seed``, data-order seed ``data_seed``, training lengths 1..``N`` (default: the
    scale's)."""
    s = lookup(SCALES, scale, "scale")
    st = lookup(SETTINGS, setting, "addition setting")
    N_ = s["N"] if N is None else int(N)
    M = max_test_length(scale, N_)
    size = {}
    if s["preset"]:
        n_layers, d_model, d_ff, n_heads = ZHOU2024_SIZES[s["preset"]]
        size = dict(n_layers=n_layers, d_model=d_model, d_ff=d_ff, n_heads=n_heads)
    mc = dict(ZHOU2024_BLOCK, **size, **s["model"], posenc=st["posenc"],
              positions=st["positions"])
    task_kwargs = {"max_train_length": N_, "max_eval_length": M, "format": st["format"],
                   "hints": st["hints"], "hint_start": "random"}
    if st["format"] == "standard" and st["hints"]:
        # stated, not left to the default: standard-format runs made before issue 27 had the
        # hints descending as written ('lsd_first') and store no hint_order, so the sweep
        # reports them as a different config instead of reusing them as this order
        task_kwargs["hint_order"] = "written"
    if st["spaces"]:
        task_kwargs["random_spaces"] = s["spaces"]
    if st["positions"] == "randomized":
        mc["positions_kwargs"] = {"max_length": s["L"], "eval_mode": "randomized"}
    elif st["positions"] == "coupling":
        # ids 1..M+1 for the widest test number and M+2 for the separator after it, all of them
        # trained through the random start (Cho et al.: max_pos >= the test length + 2)
        mc["positions_kwargs"] = {"max_position": M + 2}
        mc["posenc_kwargs"] = {"max_positions": M + 3}
    elif st["positions"] == "abacus":
        # training offsets k <= M make the trained indices cover every test number (McLeish et
        # al.: k <= 99 for tests to 100 digits)
        mc["positions_kwargs"] = {"max_k": M}
        mc["posenc_kwargs"] = {"max_positions": 2 * M + 2}
    splits = length_splits(eval_lengths(scale, N_))
    # a setting's own budget at this scale (the lr / steps its search found), else the scale's
    s = dict(s, **s.get("per_setting", {}).get(setting, {}))
    train = train_section(s, seed, device, log_every=max(1, min(50, s["steps"] // 20)),
                          base=ZHOU2024_TRAIN, copy=("lr", "warmup_steps", "eval_every"),
                          data_seed=data_seed, eval_splits=length_splits(s["track"]),
                          eval_sequences=s["track_sequences"],
                          **({"precision": s["precision"]} if "precision" in s else {}))
    return {"name": name or run_name(setting, seed, data_seed, N),
            "model": mc, "task": {"name": "addition", "kwargs": task_kwargs}, "train": train,
            "eval": {"splits": splits, "sequences": s["eval_sequences"],
                     "batch_size": s["eval_batch_size"], "seed": EVAL_SEED}}


def trial_seeds(scale: str, trials=None) -> tuple[list, list]:
    """(init seeds of the ablation settings, init seeds of the four PEs with hints): the scale's
    ``trials`` and ``pe_trials`` (Fig. 3's best-of statistic gets more trials at cpu scale), or
    ``trials`` (``--seeds``) for both."""
    s = SCALES[scale]
    if trials is not None:
        return list(trials), list(trials)
    return list(s["trials"]), list(s.get("pe_trials", s["trials"]))


def build_specs(scale: str = "cpu", *, settings=None, trials=None, device: str = "cpu",
                train_lengths: bool | None = None, heatmap: bool | None = None):
    """RunSpecs: settings x trials (group ``main``), FIRE at the scale's training lengths
    (``train_length``) and FIRE on the init x data-order grid (``heatmap``); a run shared by two
    groups is built once (tagged with the first). Tags: ``setting label N seed data_seed
    group``."""
    s = SCALES[scale]
    settings = select(settings, SETTINGS, s["settings"], "setting")
    trials, pe_trials = trial_seeds(scale, trials)
    if train_lengths is None:
        train_lengths = s.get("train_lengths_default", True)
    if heatmap is None:
        heatmap = s.get("heatmap_default", True)
    specs, seen = [], set()

    def add(setting, seed, data_seed, N, group):
        name = run_name(setting, seed, data_seed, None if N == s["N"] else N)
        if name in seen:
            return
        seen.add(name)
        cfg = run_config(setting, scale, seed, data_seed, None if N == s["N"] else N,
                         device=device, name=name)
        specs.append(RunSpec(name, cfg, {"setting": setting, "label": SETTINGS[setting]["label"],
                                         "N": N, "seed": seed, "data_seed": data_seed,
                                         "group": group}))

    for setting in settings:
        for t in (pe_trials if setting in PES else trials):
            add(setting, t, 0, s["N"], "main")
    if train_lengths and "fire" in settings:
        for N in s["train_lengths"]:
            for t in s["train_length_trials"]:
                add("fire", t, 0, N, "train_length")
    if heatmap and "fire" in settings:
        inits, orders = s["heatmap"]
        for i in inits:
            for d in orders:
                add("fire", i, d, s["N"], "heatmap")
    return specs


def _trials(seeds) -> str:
    return (f"{len(seeds)} trial{'s' if len(seeds) != 1 else ''} (init seed"
            f"{'s' if len(seeds) != 1 else ''} {', '.join(map(str, seeds))}, one data order)")


def _own_budgets(s: dict) -> str:
    """'; at their own budgets: KerpleLog lr 0.001, ...' for the settings of the scale whose lr
    or steps differ from the scale's (``per_setting``)."""
    parts = []
    for setting, own in s.get("per_setting", {}).items():
        if setting not in s["settings"]:
            continue
        bits = ([f"lr {own['lr']:g}"] if "lr" in own else []) + (
            [f"{own['steps']:,} steps"] if "steps" in own else [])
        parts.append(f"{SETTINGS[setting]['label']} {' and '.join(bits)}")
    return ("; at their own budgets (so Fig. 3's arms differ in lr): " + ", ".join(parts)
            if parts else "")


def caption(scale: str, *, n_runs: int, trials, pe_trials=None) -> str:
    s = SCALES[scale]
    pe_trials = list(trials if pe_trials is None else pe_trials)
    if s["preset"]:
        model = f"the paper's {s['preset'].upper()} model"
    else:
        m = s["model"]
        model = (f"a small model of the paper's block ({m['n_layers']} blocks, d_model "
                 f"{m['d_model']}, GeGLU FFN {m['d_ff']}, {m['n_heads']} heads)")
    text = (f"Scale `{scale}`: {n_runs} runs; {model}; train on 1..{s['N']} digits, "
            f"{s['steps']:,} steps at batch {s['batch_size']}, lr {s['lr']:g}"
            + (f", {s['precision']} autocast" if s.get("precision", "fp32") != "fp32" else "")
            + (f"; EM at every length 1..{s['M']}" if s["test_stride"] == 1 else
               f"; EM at lengths 1..{s['M']} in steps of {s['test_stride']} (and {s['M']})")
            + f" with {s['eval_sequences']} sequences; {_trials(trials)}"
            + ("" if pe_trials == list(trials) else
               f" ({_trials(pe_trials)} for {', '.join(PE_LABELS.values())} with hints)")
            + _own_budgets(s)
            + f"; randomized positions from "
            f"[0, {s['L']}); random spaces p = {s['spaces']}.")
    if scale != "paper":
        p = SCALES["paper"]
        text += (f" The paper: 25M model, 1..{p['N']} digits, {p['steps']:,} steps at batch "
                 f"{p['batch_size']}, EM at 1..{p['M']} with {p['eval_sequences']} sequences, 10 "
                 f"trials; numbers at this scale are not comparable in absolute terms.")
    return text


__all__ = ["PES", "PE_LABELS", "SETTINGS", "FIGURES", "ERROR_SETTINGS", "SCALES", "EVAL_SEED",
           "max_test_length", "eval_lengths", "run_name", "run_config", "trial_seeds", "build_specs",
           "default_device", "caption"]
