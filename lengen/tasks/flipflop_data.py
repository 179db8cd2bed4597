"""Loader for the official flip-flop data set (``synthseq/flipflop`` on the Hugging Face hub).

The data set has one ``text`` column of strings such as ``w1i0r1...``: instruction characters
``w r i`` each followed by a bit ``0 1``. This module reads it from

* a Parquet file (via ``pyarrow``),
* a JSON-lines file with a ``text`` field per line,
* a plain-text file with one sequence per line,
* or a hub data set name such as ``synthseq/flipflop:val_sparse`` through ``datasets`` when it is
  installed and the hub is reachable,

and validates every row, raising a ``ValueError`` naming the first malformed one (row number and
reason): all rows the same even length, alternating instruction/bit, first instruction ``w``,
last ``r``, and every read bit equal to the latest written bit.
"""
from __future__ import annotations

import json
import os

import torch

from lengen.fileio import check_regular_file

#: the flip-flop alphabet in token-id order (the data set card: w=0, r=1, i=2, 0=3, 1=4)
CHARS = "wri01"

_LUT = {c: i for i, c in enumerate(CHARS)}


def encode_row(text: str) -> list[int]:
    return [_LUT[c] for c in text]


def validate_row(text, row: int, expected_len: int | None) -> str | None:
    """Return the reason row ``text`` is malformed, or None when it is a valid sequence."""
    if not isinstance(text, str):
        return f"expected a string, got {type(text).__name__}"
    if not text or len(text) % 2:
        return f"length {len(text)} is not a positive even number"
    if expected_len is not None and len(text) != expected_len:
        return f"length {len(text)} differs from the first row's {expected_len}"
    last = None
    for p in range(0, len(text), 2):
        ins, bit = text[p], text[p + 1]
        if ins not in "wri":
            return f"character {p} is {ins!r}, expected an instruction w/r/i"
        if bit not in "01":
            return f"character {p + 1} is {bit!r}, expected a bit 0/1"
        if p == 0 and ins != "w":
            return "first instruction is not 'w'"
        if ins == "w":
            last = bit
        elif ins == "r" and bit != last:
            return f"read at character {p} returns {bit} but the last written bit is {last}"
    if text[-2] != "r":
        return "last instruction is not 'r'"
    return None


def _read_texts(source: str) -> list:
    if os.path.isdir(source):
        raise ValueError(f"{source} is a directory; give a flip-flop data file (.parquet, .jsonl "
                         f"or .txt) or a hub name such as synthseq/flipflop:val")
    check_regular_file(source, "flip-flop data file", "give a .parquet, .jsonl or .txt file")
    ext = os.path.splitext(source)[1].lower()
    if not os.path.exists(source) and (ext in (".parquet", ".jsonl", ".json", ".txt")
                                       or os.path.dirname(source) and
                                       os.path.isdir(os.path.dirname(source))):
        raise FileNotFoundError(f"flip-flop data file {source} does not exist; check the path "
                                f"(or give a hub name such as synthseq/flipflop:val)")
    if os.path.exists(source):
        if ext == ".parquet":
            try:
                import pyarrow.parquet as pq  # optional dependency
            except ImportError as e:  # pragma: no cover - depends on the environment
                raise ImportError("reading Parquet needs pyarrow: pip install 'lengen[data]'") from e
            try:
                table = pq.read_table(source)
            except Exception as e:  # noqa: BLE001 - pyarrow's error types vary by version
                raise ValueError(f"{source} is not a readable Parquet file ({type(e).__name__}: "
                                 f"{e})") from None
            if "text" not in table.column_names:
                raise ValueError(f"{source}: no 'text' column (columns: {table.column_names})")
            return table.column("text").to_pylist()
        try:
            with open(source, encoding="utf-8") as f:
                lines = [ln.rstrip("\r\n") for ln in f if ln.strip()]  # blank lines skipped
        except UnicodeDecodeError as e:
            raise ValueError(f"{source} is not a text file (byte {e.start} is not UTF-8); flip-flop "
                             f"data files are .parquet, .jsonl or one sequence per text line, "
                             f"e.g. w1i0r1") from None
        if ext in (".jsonl", ".json"):
            texts = []
            for n, ln in enumerate(lines):
                try:
                    texts.append(json.loads(ln)["text"])
                except (json.JSONDecodeError, KeyError, TypeError) as e:
                    raise ValueError(f"{source}: row {n} is not a JSON object with a 'text' field ({e})")
            return texts
        return lines
    # not a file: a hub data set "name[:split]"
    try:
        import datasets  # optional dependency
    except ImportError as e:
        raise FileNotFoundError(f"{source!r} is not a file, and loading it as a hub data set needs "
                                f"the 'datasets' package: pip install 'lengen[data]'") from e
    name, _, split = source.partition(":")
    return datasets.load_dataset(name, split=split or "train")["text"]


# (path, mtime, size, limit) -> tokens, so validating a config and then building its task (or the
# runs of a sweep) read a file once; at most one entry per split kind (train, iid, sparse, dense)
_CACHE: dict = {}
_CACHE_SIZE = 4


def load_flipflop(source: str, limit: int | None = None) -> torch.Tensor:
    """Load and validate official-format sequences -> tokens [N, T] int64. A file read before
    (same path, size and modification time) is not read again."""
    key = None
    if os.path.isfile(source):
        st = os.stat(source)
        key = (os.path.abspath(source), st.st_mtime_ns, st.st_size, limit)
        if key in _CACHE:
            return _CACHE[key]
    tokens = _load_flipflop(source, limit)
    if key is not None:
        while len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = tokens
    return tokens


def _load_flipflop(source: str, limit: int | None) -> torch.Tensor:
    texts = _read_texts(source)
    if limit is not None:
        texts = texts[:limit]
    if not texts:
        raise ValueError(f"{source}: no rows")
    expected = len(texts[0]) if isinstance(texts[0], str) else None
    for n, text in enumerate(texts):
        reason = validate_row(text, n, expected)
        if reason:
            shown = text if not isinstance(text, str) or len(text) <= 40 else text[:40] + "..."
            raise ValueError(f"{source}: row {n} is malformed: {reason} (row: {shown!r})")
    return torch.tensor([encode_row(t) for t in texts], dtype=torch.long)


def save_flipflop_text(tokens: torch.Tensor, path: str) -> None:
    """Write sequences in the official character format (one per line, or JSONL/Parquet by ext)."""
    texts = ["".join(CHARS[int(t)] for t in row) for row in tokens]
    ext = os.path.splitext(path)[1].lower()
    if ext == ".parquet":
        import pyarrow as pa  # optional dependency
        import pyarrow.parquet as pq  # optional dependency

        pq.write_table(pa.table({"text": texts}), path)
    elif ext in (".jsonl", ".json"):
        with open(path, "w") as f:
            f.writelines(json.dumps({"text": t}) + "\n" for t in texts)
    else:
        with open(path, "w") as f:
            f.writelines(t + "\n" for t in texts)
