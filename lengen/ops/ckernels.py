"""Small C kernels for the tiled CPU ops: compiled at first use, cached, loaded with ctypes.

Some per-row work of the CPU training ops (CoPE's running position sums, interpolation lookups and
bucket sums) has no fast PyTorch form on CPU: ATen runs ``cumsum``, ``gather`` and
``scatter_add_`` as scalar loops (several times an elementwise op's cost per element, measured
in benchmarks/RESULTS.md, "CPU primitives"; ``bincount``, ``index_add_``, ``searchsorted`` and
``nonzero``, which could replace the scatter, were no faster when tried). A plain C loop does the
same work in one pass per row. The sources live next to their ops (``lengen/ops/<op>/*.c``, plain
C99, no PyTorch headers) so they build in well under a second with the C compiler that is present,
without ninja or Python headers.

* Compiler: ``$CC``, else ``cc`` / ``gcc`` / ``clang`` on ``PATH``, else Zig's C compiler from the
  ``ziglang`` package (``pip install "lengen[ckernels]"``: a C toolchain from the package registry,
  for machines without one); flags ``-O3 -fPIC -shared`` (no ``-march=native``: the cached
  library may be shared by machines of one architecture).
* Cache: ``<lengen cache>/ckernels`` (``$LENGEN_CACHE_DIR``, else ``$XDG_CACHE_HOME/lengen``, else
  ``~/.cache/lengen``, as the token cache), one file per hash of (source, compiler, its version,
  flags, machine), written atomically (parallel processes may build at once).
* Fallback: no compiler, a failed build or load, or ``LENGEN_C_KERNELS=0`` -> :func:`load`
  returns None (a warning says why, once) and the op runs its PyTorch code, which computes the
  same values (the tests compare both paths with the dense references).

ctypes releases the GIL during a call, so the ops' worker threads (:func:`lengen.ops.cpu_tiles.
run_groups`) run kernels in parallel.
"""
from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import warnings
from pathlib import Path

from lengen.fileio import default_cache_dir

FLAGS = ["-O3", "-fPIC", "-shared", "-std=c99"]
_lock = threading.Lock()
_loaded: dict[str, ctypes.CDLL | None] = {}


def env_on(name: str) -> bool:
    """A switch read from the environment at call time: on unless ``$name`` is 0 / false / no /
    off (any case)."""
    return os.environ.get(name, "1").strip().lower() not in ("0", "false", "no", "off")


def enabled() -> bool:
    return env_on("LENGEN_C_KERNELS")


def find_compiler() -> list[str]:
    """The compiler command (a list: ``[cc]``, ``$CC`` split as a shell would, e.g.
    ``[ccache, gcc]``, or ``[python, -m, ziglang, cc]``); OSError saying why there is none. An
    explicit ``$CC`` is used alone: when its program is not found the kernels are not built."""
    cc = os.environ.get("CC", "").strip()
    if cc:
        words = shlex.split(cc)
        found = shutil.which(words[0]) or (words[0] if os.path.isfile(words[0]) else None)
        if found is None:
            raise OSError(f"CC={os.environ['CC']!r}: no such program")
        return [found, *words[1:]]
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name)
        if found:
            return [found]
    if importlib.util.find_spec("ziglang") is not None:
        return [sys.executable, "-m", "ziglang", "cc"]
    raise OSError("no C compiler found (set CC, install cc/gcc/clang, or pip install ziglang)")


def compiler() -> list[str] | None:
    """:func:`find_compiler`, or None where there is no compiler."""
    try:
        return find_compiler()
    except OSError:
        return None


def cache_dir() -> Path:
    return Path(default_cache_dir()) / "ckernels"


def _version(cc: list[str]) -> str:
    try:
        return subprocess.run([*cc, "--version"], capture_output=True, text=True,
                              timeout=30).stdout.splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


def build(source: Path, cc: list[str], out_dir: Path) -> Path:
    """Compile ``source`` into a cached shared library (reused when present); returns its path.
    Raises OSError / subprocess.CalledProcessError on failure."""
    text = source.read_bytes()
    key = hashlib.sha256(b"\0".join([text, " ".join(cc).encode(), _version(cc).encode(),
                                     " ".join(FLAGS).encode(),
                                     platform.machine().encode()])).hexdigest()[:16]
    lib = out_dir / f"{source.stem}-{key}.so"
    if lib.exists():
        return lib
    out_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out_dir)
    os.close(fd)
    try:
        subprocess.run([*cc, *FLAGS, "-o", tmp, str(source)], check=True, capture_output=True,
                       text=True, timeout=300)
        os.replace(tmp, lib)                                 # atomic: a racing build is harmless
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return lib


def load(source: Path, version: int) -> ctypes.CDLL | None:
    """The library built from ``source`` (a C file whose ``<stem>_version()`` returns
    ``version``), or None when C kernels are off or cannot be built here (warns once)."""
    key = str(source)
    with _lock:
        if key in _loaded:
            return _loaded[key]
        lib = None
        if enabled():
            try:
                cc = find_compiler()
                path = build(source, cc, cache_dir())
                try:
                    handle = ctypes.CDLL(str(path))
                except OSError:         # a cached file that does not load here: build it again
                    path.unlink(missing_ok=True)
                    handle = ctypes.CDLL(str(build(source, cc, cache_dir())))
                check = getattr(handle, f"{source.stem.replace('-', '_')}_version")
                check.restype = ctypes.c_int64
                if check() != version:
                    raise OSError(f"{source.name}: version {check()} != {version}")
                lib = handle
            except (OSError, subprocess.SubprocessError, AttributeError) as e:
                detail = getattr(e, "stderr", "") or ""
                why = f"{e}: {detail[-500:]}" if detail else str(e)
                warnings.warn(f"lengen: C kernel {source.name} unavailable ({why}); using the "
                              f"PyTorch path (same results, slower)", RuntimeWarning, stacklevel=3)
        _loaded[key] = lib
        return lib


def load_typed(source: Path, version: int, signatures: dict) -> ctypes.CDLL | None:
    """:func:`load`, with each entry point's ctypes signature set once per loaded library:
    ``signatures`` maps a function name to ``(argtypes, restype)``."""
    lib = load(source, version)
    if lib is not None and not getattr(lib, "_lengen_typed", False):
        for name, (argtypes, restype) in signatures.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = argtypes, restype
        lib._lengen_typed = True
    return lib


def refuse_double_backward(what: str, instead: str = "set LENGEN_C_KERNELS=0 for that") -> None:
    """Called first in a C kernel's autograd backward: with create_graph=True (grad mode on
    during backward) the kernel's gradient would have no graph, so say so instead of returning
    a gradient that silently has none."""
    import torch

    if torch.is_grad_enabled():
        raise RuntimeError(f"{what} has no double backward (create_graph=True); {instead}")


def reset() -> None:
    """Forget loaded libraries (tests switch C kernels on and off)."""
    with _lock:
        _loaded.clear()
