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
  flags, machine), written atomically (parallel processes may build at once): compiled to a
  temporary name in that folder and moved with ``os.replace``; a failed or interrupted build
  removes its temporary file, and files that killed builds left are swept (:func:`sweep_stale`).
* When: at first use, after one line on stderr (:data:`NOTE`: a cold, busy machine takes tens
  of seconds), or up front with ``lengen build-kernels`` (:func:`build_all`). The sources ship in
  the wheel (``package-data`` in pyproject.toml, tested by tests/test_packaging.py).
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
import itertools
import threading
import time
import warnings
from pathlib import Path

from lengen.fileio import default_cache_dir

FLAGS = ["-O3", "-fPIC", "-shared", "-std=c99"]
_lock = threading.Lock()
_loaded: dict[str, ctypes.CDLL | None] = {}
_counter = itertools.count()


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


#: how long a build may run (the compiler is killed after it); a temporary file older than this
#: in the cache was left by a process that died mid-build and is removed
BUILD_TIMEOUT_S = 300
#: the note printed once per process before the first compile (a cold machine may take a while)
NOTE = ("lengen: compiling C kernels for this machine (one time, ~{s} s; `lengen build-kernels` "
        "does it up front, LENGEN_C_KERNELS=0 skips them) ...")
#: the note's estimate of one kernel's build (gcc -O3 on a small, busy machine; a few seconds on
#: an idle workstation)
SECONDS_PER_KERNEL = 20
_PACKAGE = Path(__file__).resolve().parents[1]           # the lengen folder
_noted = False


def sources() -> list[Path]:
    """Every C kernel source shipped in the package (``lengen/**/*.c``)."""
    return sorted(_PACKAGE.glob("**/*.c"))


def library_path(source: Path, cc: list[str], out_dir: Path) -> Path:
    """Where the library built from ``source`` with ``cc`` is cached: one file per hash of
    (source, compiler, its version, flags, machine)."""
    key = hashlib.sha256(b"\0".join([source.read_bytes(), " ".join(cc).encode(),
                                     _version(cc).encode(), " ".join(FLAGS).encode(),
                                     platform.machine().encode()])).hexdigest()[:16]
    return out_dir / f"{source.stem}-{key}.so"


def sweep_stale(out_dir: Path, now: float | None = None) -> list[Path]:
    """Remove what interrupted builds left in the cache: ``tmp*.so`` (the temporary names of
    lengen versions before this one, which a killed build left behind, often empty) and this
    version's ``.*.partial`` files older than :data:`BUILD_TIMEOUT_S` (a live build's are
    younger). Returns the files removed."""
    now = time.time() if now is None else now
    removed = []
    for pattern in ("tmp*.so", ".*.partial"):
        for f in out_dir.glob(pattern):
            try:
                if now - f.stat().st_mtime > BUILD_TIMEOUT_S:
                    f.unlink()
                    removed.append(f)
            except OSError:           # gone already (another process swept it) or not ours
                pass
    return removed


def build(source: Path, cc: list[str], out_dir: Path, *, note: bool = True) -> Path:
    """Compile ``source`` into a cached shared library (reused when present); returns its path.
    The compiler writes a temporary file in the cache folder (``.<name>.<pid>.<n>.partial``),
    moved onto the final name with ``os.replace`` (atomic: a racing build is harmless) and
    removed on any failure or interrupt, so the cache never holds a partial library. The first
    compile of a process prints :data:`NOTE` on stderr (``note=False``: the caller says it).
    Raises OSError / subprocess.CalledProcessError on failure."""
    global _noted
    lib = library_path(source, cc, out_dir)
    if lib.exists():
        return lib
    out_dir.mkdir(parents=True, exist_ok=True)
    sweep_stale(out_dir)
    if note and not _noted:
        _noted = True
        print(NOTE.format(s=SECONDS_PER_KERNEL * len(sources())), file=sys.stderr, flush=True)
    tmp = out_dir / f".{lib.name}.{os.getpid()}.{next(_counter)}.partial"
    try:
        subprocess.run([*cc, *FLAGS, "-o", str(tmp), str(source)], check=True,
                       capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)
        os.replace(tmp, lib)
    finally:                      # failure, KeyboardInterrupt, timeout: nothing partial stays
        tmp.unlink(missing_ok=True)
    return lib


def build_all(log=print) -> list[tuple[Path, Path | None, str]]:
    """Build every kernel of :func:`sources` into the cache now (``lengen build-kernels``):
    ``[(source, library or None, what happened)]``; never raises for a kernel that fails."""
    cc = find_compiler()
    out = []
    for source in sources():
        t0 = time.perf_counter()
        cached = library_path(source, cc, cache_dir()).exists()
        try:
            lib = build(source, cc, cache_dir(), note=False)
            ctypes.CDLL(str(lib))
            what = "cached" if cached else f"built in {time.perf_counter() - t0:.1f} s"
        except (OSError, subprocess.SubprocessError) as e:
            lib, what = None, f"FAILED: {e}"
        log(f"  {source.relative_to(_PACKAGE)}: {what}")
        out.append((source, lib, what))
    return out


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
