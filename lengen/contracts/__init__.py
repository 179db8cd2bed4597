"""Generic contracts for any registry entry, built-in or plugin: one implementation, run by the
test suite's registry grids (``tests/test_contracts.py``) and by ``lengen check NAME``.

:func:`plan` says which contract runs on which combination for an entry (a positional scheme is
run with every built-in attention kind, an attention kind with every built-in scheme, except
the pairs that do not combine: a token mixer takes only the schemes acting outside attention; a
sampler with RoPE + softmax and NoPE + softmax, a task on its own); :func:`check` runs a plan and
returns one row per (contract, combination) with ``status`` pass / fail / skip and the reason.
The contracts themselves are in :mod:`lengen.contracts.model` and :mod:`lengen.contracts.task`.
"""
from __future__ import annotations

from lengen.attention import ATTENTION_POINT, ATTENTIONS
from lengen.checks import did_you_mean
from lengen.contracts.model import MODEL_CONTRACTS, Failure, Skip
from lengen.contracts.task import TASK_CONTRACTS
from lengen.errors import ConfigError
from lengen.model.config import combines
from lengen.posenc import POSENC_POINT, POSENCS
from lengen.samplers import SAMPLER_POINT
from lengen.tasks import TASK_POINT, build_task
from lengen.tasks.sequence.base import SequenceTask

#: registry kind -> (config key, contracts that apply)
KINDS = {
    "posenc": ("model.posenc", ("causal", "paths_agree", "batched_positions", "dtype",
                                "generation", "bad_kwargs")),
    "attention": ("model.attention", ("causal", "paths_agree", "batched_positions", "dtype",
                                      "generation", "bad_kwargs")),
    "positions": ("model.positions", ("causal", "paths_agree", "generation", "bad_kwargs")),
    "task": ("task.name", tuple(TASK_CONTRACTS)),
}


def points():
    """kind -> the ExtensionPoint that resolves its names."""
    return {"posenc": POSENC_POINT, "attention": ATTENTION_POINT, "positions": SAMPLER_POINT,
            "task": TASK_POINT}


def find_kind(name: str) -> str:
    """The registry kind a name belongs to: a built-in or installed plugin name, or the base class
    of the class an import path names. A ConfigError lists every kind's names otherwise."""
    errors = []
    for kind, point in points().items():
        if name in point.registry or name in point.plugins():
            return kind
    for kind, point in points().items():
        try:
            point.get(name)
            return kind
        except ConfigError as e:
            errors.append(str(e))
    if ":" in name:
        if "could not be imported" in errors[0] or "has no" in errors[0]:
            # the import failed before the class could say which kind it is: no kind's name
            # in the message (it once called a task a "positional scheme")
            raise ConfigError(f"'{name}': {errors[0].split('): ', 1)[-1]}")
        raise ConfigError(f"'{name}' is not a positional scheme, attention kind, position sampler "
                          f"or task class")
    names = [n for p in points().values() for n in [*p.registry, *p.plugins()]]
    raise ConfigError(f"'{name}' is not a positional scheme, attention kind, position sampler or "
                      f"task (see `lengen list`), nor an import path package.module:Name to "
                      f"one.{did_you_mean(name, names)}")


def plan(kind: str, name: str) -> list[tuple[str, dict]]:
    """(contract, combination) pairs to run for entry ``name`` of ``kind``."""
    if kind == "task":
        return [(c, {"task": name}) for c in KINDS["task"][1]
                if c != "answers" or _has_answers(points()["task"].get(name))]
    # only the pairs the config does not refuse (lengen.model.config.pair_refusal: a token
    # mixer with a scheme acting inside attention, PoPE's wide q/k with CoPE, Diff, PaTH)
    if kind == "posenc":
        cls = points()["posenc"].get(name)
        combos = [{"posenc": name, "attention": a} for a, c in ATTENTIONS.items()
                  if combines(c, cls)]
    elif kind == "attention":
        cls = points()["attention"].get(name)
        combos = [{"posenc": p, "attention": name} for p, c in POSENCS.items()
                  if combines(cls, c)]
        combos += layout_combos(name, cls)
    else:
        combos = [{"posenc": p, "attention": "softmax", "positions": name} for p in ("rope", "nope")]
    out = []
    for contract in KINDS[kind][1]:
        if contract == "bad_kwargs":                  # one combination says it
            out.append((contract, dict(combos[0], section=kind)))
        else:
            out += [(contract, c) for c in combos]
    return out


def layout_combos(name: str, cls) -> list[dict]:
    """The per-layer options an attention kind takes (:mod:`lengen.model.config`), each run
    through the same contracts: model-level q/k norm (kinds with queries and keys, TRA having its
    own), sliding-window and chunked masks (kinds with ``supports_window``), and a mixed layout
    (a RoPE layer with a local mask or q/k norm, then a global NoPE layer)."""
    if cls.is_token_mixer:
        return []
    out = []
    local = {"window": 3} if getattr(cls, "supports_window", False) else {}
    if name != "tra":
        out.append({"posenc": "rope", "attention": name, "qk_norm": "rms"})
        local = {**local, "qk_norm": "rms"}
    if getattr(cls, "supports_window", False):
        out += [{"posenc": "rope", "attention": name, "window": 3},
                {"posenc": "alibi", "attention": name, "chunk": 4}]
    if local and combines(cls, POSENCS["rope"]) and combines(cls, POSENCS["nope"]):
        out.append({"posenc": "rope", "attention": name,
                    "layers": [local, {"posenc": "nope"}]})
    return out


def _has_answers(cls) -> bool:
    """Whether the ``answers`` contract can check a task class: a decoder (targets are the next
    inputs) or a sequence task of the standard layout (its ``solve`` gives the answer)."""
    return bool(getattr(cls, "causal", False)) or (
        issubclass(cls, SequenceTask) and cls.sample is SequenceTask.sample)


def run_one(contract: str, combo: dict) -> tuple[str, str]:
    """(status, reason) of one contract on one combination: pass, fail (with the reason) or skip
    (why it does not apply). An exception other than a Failure is a fail too, named."""
    try:
        if "task" in combo:
            TASK_CONTRACTS[contract](build_task(combo["task"]))
        else:
            MODEL_CONTRACTS[contract](**combo)
    except Skip as e:
        return "skip", str(e)
    except Failure as e:
        return "fail", str(e)
    except Exception as e:  # noqa: BLE001 - a crash inside a contract is the entry's failure
        return "fail", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return "pass", ""


def check(name: str, kind: str | None = None, *, progress=None) -> list[dict]:
    """Rows ``{entry, kind, contract, with, status, reason}`` for every contract of entry
    ``name`` (its kind found from the registries or the class unless given)."""
    kind = kind or find_kind(name)
    steps = plan(kind, name)
    rows = []
    for contract, combo in (progress(steps) if progress else steps):
        status, reason = run_one(contract, combo)
        partner = ", ".join(f"{k}={v}" for k, v in combo.items()
                            if k not in (kind, "section") and v != name)
        rows.append({"entry": name, "kind": kind, "contract": contract, "with": partner,
                     "status": status, "reason": reason})
    return rows


__all__ = ["KINDS", "MODEL_CONTRACTS", "TASK_CONTRACTS", "Failure", "Skip", "check",
           "find_kind", "plan", "run_one"]
