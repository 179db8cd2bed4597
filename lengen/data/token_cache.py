"""The tokenized corpus, cached once on disk as a flat memory-mapped integer array.

``cached_tokens(corpus, split, tokenizer)`` returns a read-only ``numpy.memmap`` of the split's
token ids (``uint16`` when the vocabulary fits, else ``uint32``). The first call tokenizes the split
in streamed chunks of lines (never a Python list of the whole corpus) and writes the cache; later
calls map the file and start in the time it takes to checksum it (BLAKE2b; its rate is measured
in benchmarks/RESULTS.md, "CPU primitives").

Files, in ``cache_dir`` (default ``$LENGEN_CACHE_DIR``, else ``$XDG_CACHE_HOME/lengen``, else
``~/.cache/lengen``): ``<corpus>-<split>-<tokenizer>-<key>.bin`` (the raw ids) and ``.json`` (the
sidecar: token count, dtype, BLAKE2b checksum of the ``.bin`` and the full key). The key hashes the
corpus identity (file paths + sizes + mtimes, or package version + content hash), the tokenizer
identity (name + vocabulary hash) and ``max_chars``, so changing any of them builds a new cache.

Crash safety: the ids go to a temporary file that is fsynced and renamed into place; the sidecar is
written last, the same way. A cache is read only if its sidecar exists, matches the key, and the
``.bin`` has the recorded size and checksum, so a write killed at any point (no sidecar, a stale
sidecar, a truncated file) is detected and rebuilt, never read. Builders of the same cache
serialise on a lock file (``fcntl.flock``, released if the holder dies), so parallel sweep workers
tokenize a corpus once.
"""
from __future__ import annotations

import contextlib
import glob
import hashlib
import itertools
import json
import os
import sys
import time
import warnings

import numpy as np

from lengen.fileio import default_cache_dir, file_digest, save_json_atomic

FORMAT = 1
CHUNK_CHARS = 1 << 20        # characters per encode call


def cache_key(corpus, split: str, tokenizer, max_chars: int | None = None) -> dict:
    return {"format": FORMAT, "corpus": corpus.identity(split), "tokenizer": tokenizer.identity(),
            "max_chars": max_chars, "dtype": np.dtype(tokenizer.dtype).name}


def cache_paths(corpus, split, tokenizer, key: dict, cache_dir: str) -> tuple[str, str]:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    base = os.path.join(cache_dir, f"{corpus.name}-{split}-{tokenizer.name}-{digest}")
    return base + ".bin", base + ".json"


def _checksum(path: str) -> str:
    return file_digest(path, "blake2b", digest_size=16)


def load_cache(bin_path: str, meta_path: str, key: dict, verify: bool = True):
    """The cached ids as a memmap, or None when the cache is absent, incomplete or corrupt."""
    if not (os.path.exists(meta_path) and os.path.exists(bin_path)):
        return None
    try:
        with open(meta_path) as f:
            meta = json.load(f)
        dtype = np.dtype(meta["dtype"])
        n = int(meta["tokens"])
        ok = (meta.get("key") == key and n > 0
              and os.path.getsize(bin_path) == n * dtype.itemsize
              and (not verify or _checksum(bin_path) == meta["checksum"]))
    except (OSError, ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        warnings.warn(f"token cache {bin_path} is incomplete or corrupt; rebuilding it")
        return None
    return np.memmap(bin_path, dtype=dtype, mode="r", shape=(n,))


@contextlib.contextmanager
def _lock(path: str):
    try:
        import fcntl  # POSIX only
    except ImportError:          # pragma: no cover - non-POSIX: no inter-process lock
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _chunks(corpus, split: str, max_chars: int | None):
    """Lists of (lines, where) of about CHUNK_CHARS characters; the text stops after max_chars."""
    lines, where, size, total = [], [], 0, 0
    for src, n, line in corpus.lines(split):
        if max_chars is not None and total + len(line) > max_chars:
            line = line[:max_chars - total]
        lines.append(line)
        where.append((src, n))
        size += len(line)
        total += len(line)
        if size >= CHUNK_CHARS:
            yield lines, where
            lines, where, size = [], [], 0
        if max_chars is not None and total >= max_chars:
            break
    if lines:
        yield lines, where


def write_tokens(corpus, split: str, tokenizer, bin_path: str, meta_path: str, key: dict,
                 max_chars: int | None = None) -> int:
    """Tokenize ``split`` into ``bin_path`` (temp file + fsync + rename), then write the sidecar."""
    dtype = np.dtype(tokenizer.dtype)
    for stale in [meta_path] + glob.glob(bin_path + ".tmp*"):   # a dead writer's leftovers
        with contextlib.suppress(FileNotFoundError):
            os.remove(stale)
    tmp = f"{bin_path}.tmp{os.getpid()}"
    h = hashlib.blake2b(digest_size=16)
    n = 0
    try:
        with open(tmp, "wb") as f:
            for lines, where in _chunks(corpus, split, max_chars):
                ids = tokenizer.encode_lines(lines, where)
                count = sum(len(x) for x in ids)
                arr = np.fromiter(itertools.chain.from_iterable(ids), dtype=np.int64, count=count)
                if count and (arr.min() < 0 or arr.max() >= tokenizer.vocab_size):
                    raise ValueError(f"tokenizer '{tokenizer.name}' produced an id outside "
                                     f"[0, {tokenizer.vocab_size})")
                buf = arr.astype(dtype).tobytes()
                f.write(buf)
                h.update(buf)
                n += count
            f.flush()
            os.fsync(f.fileno())
        if n == 0:
            raise ValueError(f"split '{split}' of {corpus.describe()} has no text (0 tokens); "
                             f"point the task at a non-empty corpus")
        os.replace(tmp, bin_path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
    meta = {"tokens": n, "dtype": dtype.name, "checksum": h.hexdigest(), "key": key,
            "corpus": corpus.describe(), "split": split, "tokenizer": tokenizer.name,
            "created": time.strftime("%Y-%m-%d %H:%M:%S")}
    save_json_atomic(meta, meta_path)
    return n


def cached_tokens(corpus, split: str, tokenizer, cache_dir: str | None = None, *,
                  max_chars: int | None = None, verify: bool = True, quiet: bool = False):
    """Token ids of ``split`` as a read-only memmap ``[N]``, tokenizing once (see module doc).
    ``max_chars`` keeps only the split's first characters (quick runs, tests)."""
    corpus.check_split(split)
    cache_dir = cache_dir or default_cache_dir()
    os.makedirs(cache_dir, exist_ok=True)
    key = cache_key(corpus, split, tokenizer, max_chars)
    bin_path, meta_path = cache_paths(corpus, split, tokenizer, key, cache_dir)
    ids = load_cache(bin_path, meta_path, key, verify)
    if ids is not None:
        return ids
    with _lock(bin_path + ".lock"):
        # another process may have finished it while we waited for the lock
        ids = load_cache(bin_path, meta_path, key, verify)
        if ids is None:
            t0 = time.time()
            if not quiet:
                print(f"lengen: tokenizing {corpus.describe()} [{split}] with {tokenizer.name} "
                      f"(once; cached in {cache_dir})", file=sys.stderr, flush=True)
            n = write_tokens(corpus, split, tokenizer, bin_path, meta_path, key, max_chars)
            if not quiet:
                print(f"lengen: {n:,} tokens in {time.time() - t0:.1f} s", file=sys.stderr,
                      flush=True)
            # write_tokens checksummed every byte it wrote: check the key and size only
            ids = load_cache(bin_path, meta_path, key, verify=False)
    return ids


__all__ = ["cached_tokens", "cache_key", "cache_paths", "load_cache", "write_tokens"]
