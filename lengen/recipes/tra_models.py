"""The nine models of the TRA paper's Table 1 (flip-flop) and Table 2 (WikiText-103), shared by
``lengen reproduce tra-flipflop`` and ``lengen reproduce tra-wikitext``.

Both recipes train the same nine columns (CLI keys in brackets):

    NoPE  softmax + nope            APE   softmax + learned        REL   softmax + t5 (or xl)
    RoPE  softmax + rope            Label softmax + learned, positions 'label'
    FoT   fot + nope                Diff  diff + rope              CoPE  cope + nope
    TRA   tra + nope

REL has two readings (``RELS``): T5's bucketed bias (``t5``, the default) or Transformer-XL's
sinusoid relative encoding with learned projections (``xl``); see
:mod:`lengen.recipes.tra_flipflop.recipe` for why ``t5`` is the default.

Both also name runs alike (:func:`run_name`), train alike (:func:`train_section`: the scale's
AdamW and cosine-schedule keys) and take the same ``--models`` / ``--rel`` arguments
(:func:`add_model_arguments`). This module sits below both recipes so that neither imports the
other.
"""
from __future__ import annotations

from lengen.attention import ATTENTIONS
from lengen.posenc import POSENCS
from lengen.recipes import common
from lengen.registry import lookup
from lengen.samplers import SAMPLERS

#: the training keys a TRA recipe's scale sets (the paper's scheduling regime, sized per scale)
TRAIN_KEYS = ("lr", "warmup_steps", "min_lr_frac", "weight_decay", "betas", "decay_all")

# Table 1 / Table 2 columns, in the paper's order: (attention, posenc, position sampler)
MODELS = {
    "NoPE": ("softmax", "nope", "identity"),
    "APE": ("softmax", "learned", "identity"),
    "REL": ("softmax", "t5", "identity"),
    "RoPE": ("softmax", "rope", "identity"),
    "Label": ("softmax", "learned", "label"),
    "FoT": ("fot", "nope", "identity"),
    "Diff": ("diff", "rope", "identity"),
    "CoPE": ("cope", "nope", "identity"),
    "TRA": ("tra", "nope", "identity"),
}

RELS = {"t5": "t5", "xl": "xl"}


def model_parts(model: str, rel: str = "t5") -> tuple[str, str, str]:
    attention, posenc, positions = lookup(MODELS, model, "Table 1 model")
    if model == "REL":
        posenc = lookup(RELS, rel, "REL reading")
    return attention, posenc, positions


def check_available(models, rel: str = "t5") -> None:
    """Raise ValueError naming every selected model whose parts are not registered."""
    missing = []
    for m in models:
        attention, posenc, positions = model_parts(m, rel)
        lacks = [f"{kind} '{name}'" for kind, name, reg in (
            ("attention", attention, ATTENTIONS), ("posenc", posenc, POSENCS),
            ("positions", positions, SAMPLERS)) if name not in reg]
        if lacks:
            missing.append(f"{m} (needs {', '.join(lacks)})")
    if missing:
        have = [m for m in models if not any(s.startswith(m + " ") for s in missing)]
        raise ValueError("Table 1 models not available in this install: " + "; ".join(missing)
                         + f". Registered: attention {sorted(ATTENTIONS)}, posenc {sorted(POSENCS)},"
                         f" positions {sorted(SAMPLERS)}. Run the others with --models "
                         + " ".join(have))


def run_name(model: str, seed: int, rel: str = "t5") -> str:
    return f"{model}{'-xl' if model == 'REL' and rel == 'xl' else ''}-s{seed}"


def train_section(s: dict, seed: int, device: str) -> dict:
    """The ``train`` section of a run at scale ``s``: the scale's :data:`TRAIN_KEYS`, cosine
    decay, ``seed`` for the initialisation and the data order."""
    periodic = {}
    if s.get("eval_every"):              # OOD curves: every eval split, periodic_sequences each
        periodic = dict(eval_every=s["eval_every"], eval_sequences=s["periodic_sequences"])
    return common.train_section(s, seed, device, log_every=10, copy=TRAIN_KEYS,
                                schedule="cosine", **periodic)


def add_model_arguments(q, table: str) -> None:
    """--models (columns of ``table``, e.g. "Table 1") and --rel."""
    q.add_argument("--models", nargs="+", default=None, metavar="NAME",
                   help=f"subset of {table} columns (default all: {' '.join(MODELS)})")
    q.add_argument("--rel", choices=tuple(RELS), default="t5",
                   help="REL column: t5 bucketed bias (default) or Transformer-XL relative")


__all__ = ["MODELS", "RELS", "TRAIN_KEYS", "add_model_arguments", "check_available",
           "model_parts", "run_name", "train_section"]
