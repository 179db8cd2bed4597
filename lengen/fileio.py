"""Files that are never seen half-written, file digests, and where lengen keeps its caches: the
one implementation every writer of results, configs, caches and checkpoints uses.

Atomic writes go through ``<path>.tmp<pid>`` (flushed and fsynced), then ``os.replace``: a
reader sees the old file or the new one, and a killed writer leaves at most a stray temporary
file (an exception removes it), never a truncated result."""
from __future__ import annotations

import csv
import errno
import hashlib
import io
import json
import os
import shutil
import stat

from lengen.errors import ConfigError
from lengen.runfiles import OWNED_FOLDERS, RUN_FILES, refuse_owned_output


class SymlinkRefused(ConfigError):
    """A path lengen was about to write is (or lies below) a symbolic link inside a folder lengen
    owns: following it could write anywhere on the machine."""


def check_no_links(path: str, root: str | None = None) -> str:
    """Refuse to write ``path`` when it is a symbolic link, or when a folder between ``root``
    (a run directory or output folder, which may itself be a link the user made) and ``path`` is
    one: lengen never follows a link planted inside its own folders for writing (a downloaded or
    shared run directory whose ``metrics.jsonl`` points at ``~/.bashrc``). -> ``path``.

    Every file lengen writes in a run directory passes here, directly or through
    :func:`open_for_writing` / the atomic writers (whose ``root`` argument is this one)."""
    path = os.fspath(path)
    parts = [path]
    if root is not None:
        root_abs, probe = os.path.abspath(root), os.path.abspath(os.path.dirname(path))
        while probe != root_abs and probe.startswith(root_abs + os.sep):
            parts.append(probe)
            probe = os.path.dirname(probe)
    for p in parts:
        if os.path.islink(p):
            raise SymlinkRefused(
                f"{p} is a symbolic link (to {os.readlink(p)}); lengen does not follow links "
                f"inside {'the folder ' + root if root else 'its folders'} when it writes, so "
                f"nothing outside it is changed. Remove the link (or replace it with a real "
                f"{'folder' if p != path else 'file'}) and rerun")
    return path


def refuse_links_inside(run_dir: str) -> None:
    """Refuse a run directory holding a symbolic link at a name lengen writes (``RUN_FILES``:
    ``metrics.jsonl``, ``config.json`` ...) or anywhere inside the folders it fills
    (``checkpoints/``, ``tb/``, ``previous/``; ``wandb/`` itself, whose inside is wandb's): run
    when a command takes the run directory's lock, before anything is written."""
    for name in RUN_FILES:
        check_no_links(os.path.join(run_dir, name), run_dir)
    for folder in OWNED_FOLDERS:
        top = check_no_links(os.path.join(run_dir, folder), run_dir)
        if not os.path.isdir(top):
            continue
        for here, dirs, files in os.walk(top):        # os.walk does not follow links
            for n in dirs + files:
                check_no_links(os.path.join(here, n), run_dir)


def open_for_writing(path: str, mode: str = "w", root: str | None = None, **kwargs):
    """``open(path, mode)`` for writing (``w``, ``a``, ``wb``, ``ab``, ``x``) that never follows a
    symbolic link: :func:`check_no_links` first, then ``O_NOFOLLOW`` (a link planted in between
    fails with ELOOP instead of being followed)."""
    check_no_links(path, root)
    base = mode.replace("b", "").replace("+", "")
    flags = {"w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC, "a": os.O_WRONLY | os.O_CREAT |
             os.O_APPEND, "x": os.O_WRONLY | os.O_CREAT | os.O_EXCL}[base]
    if "+" in mode:
        flags = (flags & ~os.O_WRONLY) | os.O_RDWR
    flags |= getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            check_no_links(path)                # says it in words
        raise
    return os.fdopen(fd, mode, **kwargs)


def fresh_temporary(path: str, root: str | None = None) -> str:
    """``<path>.tmp<pid>``, the name an atomic write of ``path`` goes through, with whatever
    was left at that name (a stray file, a planted link) removed, never followed. -> the name."""
    check_no_links(path, root)
    tmp = f"{path}.tmp{os.getpid()}"
    if os.path.lexists(tmp):
        if os.path.isdir(tmp) and not os.path.islink(tmp):
            shutil.rmtree(tmp)
        else:
            os.unlink(tmp)
    return tmp


def _replace_atomically(path: str, write, root: str | None = None) -> None:
    """``write(tmp)`` to a temporary file beside ``path``, then rename it over ``path``; a
    failing write removes the temporary file and keeps the old ``path``. A link at ``path`` is
    replaced, never followed (``os.replace`` renames over the link itself); ``root``: see
    :func:`check_no_links`."""
    tmp = fresh_temporary(path, root)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):          # a failed write leaves nothing behind
            os.unlink(tmp)
        raise


def write_text_atomic(text: str, path: str, root: str | None = None) -> None:
    """``text`` to ``path`` through a temporary file (flushed and fsynced) and a rename."""
    def write(tmp):
        with open_for_writing(tmp, "x") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())

    _replace_atomically(path, write, root)


def savefig_atomic(fig, path: str, **kwargs) -> str:
    """A matplotlib figure to ``path`` (format from its extension; ``kwargs`` to ``savefig``,
    e.g. ``dpi``), atomically, so a reader never sees half a PNG. -> ``path``."""
    fmt = kwargs.pop("format", None) or os.path.splitext(path)[1].lstrip(".") or None
    _replace_atomically(path, lambda tmp: fig.savefig(tmp, format=fmt, **kwargs))
    return path


def save_json_atomic(obj, path: str, root: str | None = None) -> None:
    """``obj`` as indented JSON (non-JSON values as ``str``), atomically."""
    write_text_atomic(json.dumps(obj, indent=2, default=str), path, root)


def rows_to_csv(rows: list[dict]) -> str:
    """Rows (dicts) as CSV text, columns in order of first appearance; no rows: empty text."""
    if not rows:
        return ""
    keys = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=keys)
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def write_csv_atomic(rows: list[dict], path: str, root: str | None = None) -> None:
    """:func:`rows_to_csv` of ``rows`` to ``path``, atomically."""
    write_text_atomic(rows_to_csv(rows), path, root)


#: the largest config file lengen reads (a config is a few kB; anything near this is not one)
CONFIG_MAX_BYTES = 1 << 20


def check_regular_file(path: str, what: str, fix: str = "") -> None:
    """Refuse a path that exists but is not a regular file - a device (``/dev/zero``), a fifo, a
    socket: reading one may never end, or wait forever for a writer - before it is opened
    (``os.stat`` neither blocks nor reads). ``what`` names the file's role (e.g. ``config file``),
    ``fix`` says what to give instead. A missing path or a folder is left to the caller's own
    message."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return
    kind = ("a named pipe (fifo)" if stat.S_ISFIFO(mode) else "a character device"
            if stat.S_ISCHR(mode) else "a block device" if stat.S_ISBLK(mode) else "a socket"
            if stat.S_ISSOCK(mode) else "not a regular file")
    raise ConfigError(f"{what} {path} is {kind}, not a regular file: reading it might never end, "
                      f"so lengen does not read it{'; ' + fix if fix else ''}")


def read_text_capped(path: str, what: str, max_bytes: int = CONFIG_MAX_BYTES,
                     fix: str = "") -> str:
    """The UTF-8 text of a regular file of at most ``max_bytes`` (:func:`check_regular_file`
    first; a bigger file raises ConfigError naming its size, read no further than the cap)."""
    check_regular_file(path, what, fix)
    with open(path, "rb") as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ConfigError(f"{what} {path} is larger than {max_bytes // 1024} KiB "
                          f"({os.path.getsize(path)} bytes), too big to be one; "
                          f"{fix or 'check the path'}")
    return data.decode("utf-8")


def _file_in_the_way(path: str) -> str | None:
    """The nearest existing ancestor of ``path`` (or ``path`` itself) when it is not a folder."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    return None if os.path.isdir(probe) else probe


def is_disk_full(e: BaseException) -> bool:
    """A write that failed for want of space: ENOSPC / EDQUOT, or how torch.save
    (``unexpected pos 33856 vs 33808``, ``file write failed``) and safetensors (``StorageFull``)
    report it."""
    if isinstance(e, OSError) and e.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(e)
    return any(s in text for s in ("No space left on device", "StorageFull", "unexpected pos",
                                   "file write failed", "Disk quota exceeded"))


def disk_full_message(path: str, e: BaseException | None = None) -> str:
    """"disk full" with the path, the free space there and what to do."""
    try:
        free = shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free
        left = f"{free / 2**20:.0f} MiB free"
    except OSError:
        left = "free space unknown"
    return (f"disk full while writing {path} ({left} on that file system); free some space "
            f"there (or point the command at another disk) and rerun it")


def make_output_dir(path: str, flag: str = "--out") -> str:
    """Create the output folder ``path`` (and its parents) unless it exists; a regular file (or
    a file among its parents) in the way raises ConfigError saying so and what to do, instead of
    ``File exists``. -> ``path``."""
    path = os.fspath(path)
    blocker = _file_in_the_way(path)
    if blocker is not None:
        which = "is" if blocker == os.path.abspath(path) else f"lies inside {blocker}, which is"
        raise ConfigError(f"{flag} {path} {which} a file, not a folder: {flag} names a folder "
                          f"that lengen creates and writes into. Give a new folder path (e.g. "
                          f"{flag} {blocker}-out) or move the file away")
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create the {flag} folder {path}: {e.strerror or e}") from None
    return path


def check_output_file(path: str, flag: str = "--out") -> str:
    """``path`` is about to be written as a file: refuse an existing folder there, a file where
    one of its folders should be, and a name lengen owns in a run directory (``config.json``,
    ``eval.json``, checkpoints ...: :func:`lengen.rundir.layout.refuse_owned_output`); create its
    folder. -> ``path``."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise ConfigError(f"{flag} {path} is a folder; {flag} takes a file name (e.g. "
                          f"{flag} {os.path.join(path, 'plot.png')})")
    parent = os.path.dirname(os.path.abspath(path))
    blocker = _file_in_the_way(parent)
    if blocker is not None:
        raise ConfigError(f"{flag} {path} lies inside {blocker}, which is a file, not a folder; "
                          f"give a file path in a folder (e.g. {flag} {blocker}-plots/"
                          f"{os.path.basename(path)}) or move the file away")
    refuse_owned_output(path, flag, example=os.path.join(parent, "plot.png"))
    make_output_dir(parent, flag=flag)
    return path


def default_cache_dir() -> str:
    """Where lengen keeps what it can rebuild (token caches, compiled C kernels):
    ``$LENGEN_CACHE_DIR``, else ``$XDG_CACHE_HOME/lengen``, else ``~/.cache/lengen``."""
    if os.environ.get("LENGEN_CACHE_DIR"):
        return os.environ["LENGEN_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "lengen")


def file_digest(path: str, algorithm: str = "sha256", **params) -> str:
    """Hex digest of a file read in 1 MiB blocks (``params``: e.g. ``digest_size`` for
    blake2b)."""
    h = hashlib.new(algorithm, **params)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


__all__ = ["SymlinkRefused", "check_no_links", "refuse_links_inside", "open_for_writing", "fresh_temporary",
           "is_disk_full", "disk_full_message", "check_regular_file", "read_text_capped",
           "CONFIG_MAX_BYTES", "make_output_dir", "check_output_file", "write_text_atomic",
           "save_json_atomic", "savefig_atomic", "rows_to_csv", "write_csv_atomic", "file_digest",
           "default_cache_dir"]
