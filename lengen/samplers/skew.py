"""Skew functions ``f_skew`` for tail warping (eq. 8 of "Improving Length Generalization via
Position Index Warping": ``pos(j) = l * f_skew(j / l)``).

The paper requires ``f_skew: [0, 1] -> [0, 1]`` with ``f(0) = 0`` and ``f(1) = 1``, concave on
``[eps, 1]``; it uses the square root for the algorithmic tasks and the CDF of Beta(2, 5) for
language modelling (Fig. 4, Fig. B, Appendix B.1). Warped positions must keep the order of the
tokens, so we require ``f`` non-decreasing (checked numerically on a grid); concavity is what
makes it a *tail* warp (positions pushed towards the end) but is not required, so other shapes
can be studied.

A skew is named by a string, so configs stay JSON: ``"sqrt"``, ``"beta"`` (the CDF of
Beta(``beta_a``, ``beta_b``), default (2, 5)), or ``"package.module:function"`` for a function of
your own (imported, then checked). Python callers may pass the function itself. The functions are
the ones of the idealized analysis (:mod:`lengen.analysis.idealized`: ``SKEWS``, ``betainc``,
``check_skew``), so the trained positions and the analysed ones are the same numbers.
"""
from __future__ import annotations

import importlib
from typing import Callable

import numpy as np

from lengen.analysis.idealized import SKEWS, beta_cdf, check_skew

NAMED = ("sqrt", "beta")
#: grid on which a skew function is checked (f(0) = 0, f(1) = 1, non-decreasing)
CHECK_POINTS = 10001


def _import(path: str) -> Callable:
    module, _, attr = path.partition(":")
    if not module or not attr:
        raise ValueError(f"skew '{path}' is not a known name ({', '.join(NAMED)}) nor an import "
                         f"path 'package.module:function'")
    try:
        obj = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"cannot import skew function '{path}': {type(e).__name__}: {e}; give "
                         f"'package.module:function' of an importable module") from None
    if not callable(obj):
        raise ValueError(f"skew '{path}' is not a function")
    return obj


def resolve_skew(skew, beta_a: float = 2.0, beta_b: float = 5.0) -> tuple[Callable, str]:
    """-> (f, label): f maps a float64 array of t in [0, 1] to f(t), elementwise; checked."""
    if callable(skew):
        f, label = skew, getattr(skew, "__name__", "custom")
    elif skew == "sqrt":
        f, label = SKEWS["sqrt"], "sqrt"
    elif skew == "beta":
        f, label = beta_cdf(float(beta_a), float(beta_b)), f"Beta({beta_a:g}, {beta_b:g}) CDF"
    elif isinstance(skew, str):
        f, label = _import(skew), skew
    else:
        raise ValueError(f"skew must be one of {', '.join(NAMED)}, 'package.module:function' or "
                         f"a function, got {skew!r}")
    try:
        check_skew(_flat(f), name=f"skew '{label}'", n=CHECK_POINTS)
    except ValueError:
        raise
    except Exception as e:  # noqa: BLE001 - a user function that crashes on the grid
        raise ValueError(f"skew '{label}' failed on t in [0, 1]: {type(e).__name__}: {e}") from None
    return _flat(f), label


def _flat(f: Callable) -> Callable:
    """Apply ``f`` to an array of any shape through a flat float64 vector."""
    def g(t):
        t = np.asarray(t, dtype=np.float64)
        return np.asarray(f(t.reshape(-1)), dtype=np.float64).reshape(t.shape)
    g.__name__ = getattr(f, "__name__", "f")
    return g


__all__ = ["NAMED", "resolve_skew"]
