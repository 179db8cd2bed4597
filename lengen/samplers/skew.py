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
defined here and used by the idealized analysis too (:mod:`lengen.analysis.idealized`), so the
trained positions and the analysed ones are the same numbers.
"""
from __future__ import annotations

import importlib
import math
from typing import Callable

import numpy as np

from lengen.consent import check_import_allowed


def betainc(a: float, b: float, x) -> np.ndarray:
    """Regularized incomplete beta ``I_x(a, b)`` = the CDF of Beta(a, b) at x (float64).

    Continued fraction of Abramowitz & Stegun 26.5.8 (Lentz's method) for
    ``x < (a + 1) / (a + b + 2)``, where it converges fast, and ``1 - I_{1-x}(b, a)`` above;
    x is clipped to [0, 1]. Same argument order as ``scipy.special.betainc``."""
    if not (a > 0 and b > 0):
        raise ValueError(f"betainc needs a > 0 and b > 0, got a={a}, b={b}")
    x = np.clip(np.asarray(x, dtype=np.float64), 0.0, 1.0)
    out = np.where(x >= 1.0, 1.0, 0.0)
    inner = (x > 0) & (x < 1)
    xi = x[inner]
    flip = xi >= (a + 1) / (a + b + 2)
    aa, bb = np.where(flip, b, a), np.where(flip, a, b)
    xx = np.where(flip, 1.0 - xi, xi)
    lbeta = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)    # B(a, b) = B(b, a)
    front = np.exp(aa * np.log(xx) + bb * np.log1p(-xx) - lbeta) / aa
    # 1 / (1 + d1 / (1 + d2 / (1 + ...))) with d_{2m+1} = -(a+m)(a+b+m) x / ((a+2m)(a+2m+1)),
    # d_{2m} = m (b-m) x / ((a+2m-1)(a+2m))
    tiny = 1e-300
    f = np.ones_like(xx)
    c, dd = np.ones_like(xx), np.zeros_like(xx)
    done = np.zeros(xx.shape, dtype=bool)
    for k in range(1, 4000):
        m = k // 2
        if k % 2:
            num = -(aa + m) * (aa + bb + m) * xx / ((aa + 2 * m) * (aa + 2 * m + 1))
        else:
            num = m * (bb - m) * xx / ((aa + 2 * m - 1) * (aa + 2 * m))
        dd = 1.0 + num * dd
        dd = np.where(np.abs(dd) < tiny, tiny, dd)
        c = 1.0 + num / c
        c = np.where(np.abs(c) < tiny, tiny, c)
        dd = 1.0 / dd
        delta = c * dd
        f = np.where(done, f, f * delta)
        done |= np.abs(delta - 1.0) < 1e-15
        if done.all():
            break
    val = front / f                                                # I_xx(aa, bb)
    out[inner] = np.where(flip, 1.0 - val, val)
    return out


def beta_cdf(a: float = 2.0, b: float = 5.0) -> Callable:
    """f_skew = the CDF of Beta(a, b) (the paper's Fig. 4 uses Beta(2, 5))."""
    def f(t):
        return betainc(a, b, t)
    f.__name__ = f"beta({a:g},{b:g})"
    return f


SKEWS = {"identity": lambda t: np.asarray(t, dtype=np.float64),
         "sqrt": lambda t: np.sqrt(np.asarray(t, dtype=np.float64)),
         "beta": beta_cdf(2.0, 5.0)}


def check_skew(f: Callable, name: str = "f_skew", n: int = 1001) -> Callable:
    """Return f if it meets the paper's conditions (f(0) = 0, f(1) = 1, non-decreasing on [0, 1],
    checked on an n-point grid); else ValueError naming the failed condition."""
    t = np.linspace(0.0, 1.0, n)
    y = np.asarray(f(t), dtype=np.float64)
    if y.shape != t.shape or not np.all(np.isfinite(y)):
        raise ValueError(f"{name} must map an array of t in [0, 1] to finite values of the same shape")
    if abs(y[0]) > 1e-9 or abs(y[-1] - 1.0) > 1e-9:
        raise ValueError(f"{name} must satisfy f(0) = 0 and f(1) = 1 (eq. 8); got f(0)={y[0]:.4g}, "
                         f"f(1)={y[-1]:.4g}")
    if np.any(np.diff(y) < -1e-12):
        i = int(np.argmax(np.diff(y) < -1e-12))
        raise ValueError(f"{name} must be non-decreasing on [0, 1] (warped positions keep their "
                         f"order); it decreases at t={t[i]:.4g}")
    return f


NAMED = ("sqrt", "beta")
#: grid on which a skew function is checked (f(0) = 0, f(1) = 1, non-decreasing)
CHECK_POINTS = 10001


def _import(path: str) -> Callable:
    module, _, attr = path.partition(":")
    if not module or not attr:
        raise ValueError(f"skew '{path}' is not a known name ({', '.join(NAMED)}) nor an import "
                         f"path 'package.module:function'")
    check_import_allowed(path, f"skew '{path}'", tuple)      # no code from data
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
