"""Check that the numbers lengen's documents quote are the numbers the committed files give.

    python results/check_numbers.py [FILE ...]        # default: every checked document
    python results/check_numbers.py --baseline        # rewrite results/numbers-baseline.txt

Checked documents: ``results/README.md``, ``results/*/README.md``, ``results/AUDIT.md``, the
main ``README.md`` and ``docs/*.md`` (whatever they say: the checker reads them generally).

Exit 0 when every check passes, 1 with one line per mismatch otherwise. Pure Python + pandas,
a few seconds. Three checks per README:

1. **Declared figures.** A README lists the figures it derives (means, differences, ranges,
   anything not printed as such in a data file) in an HTML comment that the rendered page hides::

       <!-- numbers
       t1 := csv('table1.csv')
       tok := csv('results.csv').query("metric == 'token_acc'")
       77-78 = rng(100 * sel(tok, task='reverse_string', scheme='sincos', split='len=40').value)
       +10.7 = val(t1, 'ours_mean', task='reverse_string', scheme='rand_sincos') - val(...)
       paper: 96.4 100.0            (Ruoss et al. 2023, Table 1)
       -->

   ``FIGURE = EXPRESSION``: FIGURE must occur verbatim in the README's text (so a declaration
   cannot outlive the sentence it checks) and every number in it must equal, at the precision
   printed, the matching element of what EXPRESSION evaluates to (a number, or a sequence of as
   many numbers as FIGURE has). Expressions are Python over this folder's files (helpers
   below: ``csv``, ``jsonl``, ``mdtable``, ``grep``, ``sel``, ``row``, ``val``, ``rng``,
   ``mean``, ``num``, ``claim`` (a claim's verdict from results/claims.yaml); ``np``, ``pd``). Names bound with ``NAME := EXPRESSION`` lines can be used by later lines. ``paper: N N ...
   (source)`` lists numbers quoted from a paper, ``cited: N N ... (source)`` numbers from a file
   that is no longer in the folder (an older commit's table), ``rule: N (what)`` thresholds
   (the 90% fit rule); the source in brackets is required.

2. **Every printed result is accounted for.** Each number with a decimal point or a percent
   sign in the README's text (tables included; inline code, fenced code, links and commit /
   date / time tokens excluded) must be a declared figure, a ``paper:`` number, or occur, at the
   precision printed, among the numbers of the folder's own data files (csv, md, json, jsonl,
   txt, log; a fraction also as a percentage) or of a sibling folder the README cites as
   ``../name/``. ``results/README.md`` may quote any folder's files. This catches a number that
   is in no file at all (a typo, a stale figure, a number from memory).

4. **Every number in a results paragraph is tied** (issue 54). A *results paragraph* is any
   paragraph or table row of a results README or ``results/README.md`` (headings, code and
   comments excluded), and in ``README.md`` and ``docs/*.md`` a paragraph or table row that
   names a results folder (``results/``) or sits after a ``<!-- results -->`` line up to the
   next heading. Every number in it (whole numbers and each end of a range included; not the
   label after Fig. / Table / Eq. / Sec. / issue / item / seed / part / stop / round / step /
   layer, nor commit hashes, dates, clock times, inline code or link targets) must be

   - a declared figure of check 1 (``FIGURE = EXPRESSION``: one expression per figure);
   - tied inline: ``58.7 vs 38.5 <!-- num: [expr1, expr2] -->`` ties the numbers just before the
     marker on its line (as many as the expression gives) to that expression (a number tied
     so is checked by its expression, not looked up by check 2);
   - a ``paper:`` / ``cited:`` / ``rule:`` number of check 1;
   - before a ``<!-- from: WHERE -->`` marker on the same line, for numbers no committed file
     can give (``<!-- from: a demo run on 2026-11-28, not committed -->``): the text must also
     say so in words;
   - or listed in ``results/numbers-baseline.txt``, the untied numbers the documents held when
     this check was introduced (path, number and a hash of its line: any edit to the line makes
     its numbers new, and a new number must be tied). The baseline only shrinks, and it is
     never weaker than the check before it: check 2 takes no baseline, and a baselined number
     with a decimal point or a percent sign, or a baselined range's ends, must still occur
     among the folder's data numbers (a wrong legacy figure fails, baseline or not).

3. **Ranges must be declared.** A range of results in the text (``84-88%``, ``0.5-0.67``,
   ``25.4 to 96.3``: endpoints with a percent sign or a decimal point) must be a declared
   figure: the data files always hold some value near each endpoint, so only an expression
   can say the range is the data's minimum and maximum.
"""
from __future__ import annotations

import glob
import hashlib
import json
import math
import os
import re
import sys

import numpy as np
import pandas as pd

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROOT = os.path.join(REPO, "results")
BASELINE = os.path.join(ROOT, "numbers-baseline.txt")
DATA_EXT = (".csv", ".md", ".json", ".jsonl", ".txt", ".log")
# a number, with thousands commas, possibly followed by 'x' (a ratio: 1.52x)
NUM = re.compile(r"(?<![\w.])-?\d{1,3}(?:,\d{3})+(?:\.\d+)?(?=x?(?!\w))"
                 r"|(?<![\w.])-?\d+(?:\.\d+)?(?=x?(?!\w))")
# a number whose printed form claims a measured value: a decimal point or a percent sign
RESULT = re.compile(r"(?<![\w.\-/])(\d+\.\d+|\d+(?:\.\d+)?(?=\s?%))(?![\w.]\d)")
RANGE = re.compile(r"(?<![\w.\-/])(\d+(?:\.\d+)?)\s?%?\s?(?:-|–|to)\s?(\d+(?:\.\d+)?)(\s?%)?(?![\w.]\d)")
BLOCK = re.compile(r"<!--\s*numbers\b(.*?)-->", re.DOTALL)


# --- helpers available to the expressions --------------------------------------------------------

def _helpers(folder: str) -> dict:
    cache: dict = {}

    def path(name):
        return os.path.normpath(os.path.join(folder, name))

    def csv(name, **kw):
        """The csv file ``name`` (relative to the README's folder) as a DataFrame."""
        key = ("csv", name, repr(sorted(kw.items())))
        if key not in cache:
            cache[key] = pd.read_csv(path(name), **kw)
        return cache[key]

    def jsonl(name):
        """A jsonl file as a DataFrame (nested dicts flattened with '.')."""
        if ("jsonl", name) not in cache:
            with open(path(name)) as f:
                rows = [json.loads(line) for line in f if line.strip()]
            cache[("jsonl", name)] = pd.json_normalize(rows)
        return cache[("jsonl", name)]

    def mdtable(name, index=0):
        """The ``index``-th markdown table of a .md file as a DataFrame of strings."""
        with open(path(name)) as f:
            tables = _md_tables(f.read())
        return tables[index]

    def grep(name, pattern):
        """The number in group 1 of the first match of ``pattern`` in a text file (a log)."""
        with open(path(name)) as f:
            m = re.search(pattern, f.read())
        if not m:
            raise LookupError(f"{pattern!r} not found in {name}")
        return float(m.group(1).replace(",", ""))

    return {"csv": csv, "jsonl": jsonl, "mdtable": mdtable, "grep": grep, "sel": sel, "val": val,
            "row": row, "rng": rng, "mean": mean, "num": num, "np": np, "pd": pd,
            "claim": claim}


_CLAIMS: dict = {}


def claim(claim_id: str, folder: str | None = None):
    """The :class:`~lengen.analysis.verdicts.Verdict` that ``results/claims.yaml`` gives claim
    ``claim_id`` (its current reading, or the reading of ``folder``), as in results/VERDICTS.md:
    ``.means`` / ``.stds`` (arm label -> mean / sample std over ``.seeds``), ``.n`` / ``.fitted``
    (arm -> runs / fitted runs), ``.diffs``, ``.verdict``. A README's verdict sentence ties its
    numbers to the very computation that gives the verdict."""
    from lengen.analysis.verdict_table import judge_reading, load
    path = os.path.join(ROOT, "claims.yaml")
    key = (path, os.stat(path).st_mtime_ns)
    if key not in _CLAIMS:
        _CLAIMS.clear()
        _CLAIMS[key] = {"claims": {c["id"]: c for c in load(path)}, "verdicts": {}}
    store = _CLAIMS[key]
    if claim_id not in store["claims"]:
        raise KeyError(f"no claim {claim_id!r} in results/claims.yaml")
    c = store["claims"][claim_id]
    readings = [r for r in c["readings"] if (r["folder"] == folder if folder else r.get("current"))]
    if not readings:
        raise KeyError(f"claim {claim_id!r} has no reading of folder {folder!r} (readings: "
                       f"{[r['folder'] for r in c['readings']]})")
    vkey = (claim_id, readings[0]["folder"])
    if vkey not in store["verdicts"]:
        store["verdicts"][vkey] = judge_reading(c, readings[0])[0]
    return store["verdicts"][vkey]


def sel(df: pd.DataFrame, **eq) -> pd.DataFrame:
    """Rows whose columns equal the given values (a list/tuple value: any of them)."""
    mask = pd.Series(True, index=df.index)
    for col, want in eq.items():
        if col not in df.columns:
            raise KeyError(f"no column {col!r} (columns: {', '.join(map(str, df.columns))})")
        mask &= df[col].isin(want) if isinstance(want, (list, tuple)) else df[col] == want
    out = df[mask]
    if out.empty:
        raise LookupError(f"no row with {eq}")
    return out


def row(df: pd.DataFrame, **eq) -> pd.Series:
    """The one row matching ``eq`` (an error if none or several match)."""
    rows = sel(df, **eq)
    if len(rows) != 1:
        raise LookupError(f"{len(rows)} rows match {eq}, expected 1")
    return rows.iloc[0]


def val(df: pd.DataFrame, col: str, **eq) -> float:
    """The value of ``col`` in the one row matching ``eq``."""
    return row(df, **eq)[col]


def mean(df: pd.DataFrame, col: str, **eq) -> float:
    """The mean of ``col`` over the rows matching ``eq``."""
    return float(sel(df, **eq)[col].astype(float).mean())


def rng(values) -> tuple[float, float]:
    """(min, max) of some values: what a range 'a-b' in the text claims."""
    values = np.asarray(list(values), dtype=float)
    return float(values.min()), float(values.max())


def num(text) -> float:
    """The first number in a table cell ('**91.0** (69.2 ‡)' -> 91.0)."""
    m = NUM.search(str(text).replace("**", ""))
    if not m:
        raise ValueError(f"no number in {text!r}")
    return float(m.group().replace(",", ""))


def _md_tables(text: str) -> list[pd.DataFrame]:
    tables, rows = [], []
    for line in text.splitlines() + [""]:
        s = line.strip()
        if s.startswith("|") and s.endswith("|"):
            rows.append([c.strip() for c in s.strip("|").split("|")])
            continue
        if len(rows) >= 2:
            head, body = rows[0], [r for r in rows[2:] if len(r) == len(rows[0])]
            tables.append(pd.DataFrame(body, columns=head))
        rows = []
    return tables


# --- reading a README ----------------------------------------------------------------------------

def _decimals(s: str) -> int:
    return len(s.split(".")[1]) if "." in s else 0


def _equal(printed: str, value) -> bool:
    """Does ``value`` print as ``printed`` at ``printed``'s precision? (Half-way values either way.)"""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return False
    if math.isnan(value):
        return False
    tol = 0.5 * 10 ** -_decimals(printed) + 1e-9 * max(1.0, abs(value))
    return abs(value - float(printed.replace(",", ""))) <= tol


def _flatten(value) -> list:
    if isinstance(value, (pd.Series, pd.Index)):
        value = value.tolist()
    elif isinstance(value, np.ndarray):
        value = value.ravel().tolist()
    if isinstance(value, (list, tuple)):
        out = []
        for v in value:
            out.extend(_flatten(v))
        return out
    return [value]


def prose_text(text: str) -> str:
    """The README's text with what holds no result blanked: comments, fenced and inline code,
    link targets, commit hashes, dates and clock times (kept the same length). Also what
    tests/test_docs.py reads a docs page's numbers from."""
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group())
    text = re.sub(r"<!--.*?-->|```.*?```", blank, text, flags=re.DOTALL)
    # a docs page's include of a results README (pymdownx.snippets): checked where it lives
    text = re.sub(r"(?m)^--8<--.*$", blank, text)
    lines, code = text.split("\n"), False
    for i, line in enumerate(lines):       # indented code: 4 spaces after a blank line
        code = bool(line.startswith("    ") and (code or i == 0 or not lines[i - 1].strip()))
        if code:
            lines[i] = " " * len(line)
    text = "\n".join(lines)
    for pat in (r"`[^`\n]*`", r"\]\([^)]*\)", r"\b\d{4}-\d{2}-\d{2}\b",
                r"\b\d{1,2}:\d{2}(?::\d{2})?\b", r"\b(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b",
                r"\b\d+(?:\.\d+)?e-?\d+\b", r"\bv?\d+\.\d+\.\d+\b"):
        text = re.sub(pat, blank, text)
    return text


_FILE_NUMBERS: dict = {}


def _file_numbers(f: str) -> np.ndarray:
    """The numbers of one data file (a fraction also as a percentage), cached by path, size
    and modification time: README.md, docs/*.md and results/README.md all read every folder."""
    st = os.stat(f)
    key = (f, st.st_size, st.st_mtime_ns)
    if key not in _FILE_NUMBERS:
        with open(f, errors="replace") as fh:
            v = np.asarray([float(x.replace(",", "")) for x in
                            (m.group() for m in NUM.finditer(fh.read()))], dtype=float)
        _FILE_NUMBERS[key] = np.unique(np.concatenate([v, 100 * v[np.abs(v) <= 1.0]]))
    return _FILE_NUMBERS[key]


def _data_numbers(folders) -> np.ndarray:
    parts = [np.zeros(0)]
    for folder in folders:
        for f in glob.glob(os.path.join(folder, "**", "*"), recursive=True):
            if not f.endswith(DATA_EXT) or os.path.basename(f) == "README.md":
                continue
            parts.append(_file_numbers(f))
    return np.unique(np.concatenate(parts))


def _in_data(printed: str, data: np.ndarray) -> bool:
    x = float(printed.replace(",", ""))
    tol = 0.5 * 10 ** -_decimals(printed) + 1e-9
    i = np.searchsorted(data, x - tol)
    return bool(i < len(data) and data[i] <= x + tol)


def _is_results_doc(path: str) -> bool:
    """A results README or results/README.md (every paragraph is a results paragraph)."""
    path = os.path.abspath(path)
    return not (path == os.path.join(REPO, "README.md")
                or os.path.dirname(path) == os.path.join(REPO, "docs"))


def _results_spans(text: str, whole: bool) -> list[tuple[int, int]]:
    """The character spans of the results paragraphs (module docstring, check 4)."""
    spans, pos, marked = [], 0, False
    block: list[tuple[int, str]] = []

    def flush():
        if not block:
            return
        raw = "\n".join(t for _, t in block)
        if whole or marked or "results/" in raw:
            spans.append((block[0][0], block[-1][0] + len(block[-1][1])))

    for line in text.split("\n"):
        start = pos
        pos += len(line) + 1
        st = line.strip()
        if st.startswith("#"):
            flush()
            block, marked = [], False
            continue
        if "<!-- results -->" in st:
            marked = True
        if not st or st.startswith("|"):
            flush()
            block = [(start, line)] if st.startswith("|") else []
            if st.startswith("|"):
                flush()
                block = []
            continue
        block.append((start, line))
    flush()
    return spans


LABEL = re.compile(r"(?:\bFigs?\.|\bFigures?|\bTables?|\bTab\.|\bEqs?\.|\bSec\.|§|\bAppendix|"
                   r"\bissues?|\bitems?|\bseeds?|\bparts?|\bstops?|\brounds?|\blayers?|\bPR|#)\s*$")
INLINE = re.compile(r"<!--\s*(num|from):(.*?)-->", re.DOTALL)


def _tokens(prose: str, spans) -> list[re.Match]:
    """The numbers of the results paragraphs that state something (labels left out)."""
    out, label_end = [], -10
    for a, b in spans:
        for m in NUM.finditer(prose, a, b):
            line_start = prose.rfind("\n", 0, m.start()) + 1
            if (not prose[line_start:m.start()].strip()
                    and re.match(r"[.)]\s", prose[m.end():m.end() + 2])):
                continue                                 # an ordered list's item number
            before = prose[max(0, m.start() - 14):m.start()]
            between = prose[label_end:m.start()] if label_end >= 0 else "x"
            if LABEL.search(before) or re.fullmatch(r"\s*(?:-|–|,|and|to|or|/)\s*", between):
                if LABEL.search(before) or label_end > 0:
                    label_end = m.end()
                    continue
            label_end = -10
            out.append(m)
    return out


def _line_key(text: str, pos: int) -> str:
    a = text.rfind("\n", 0, pos) + 1
    b = text.find("\n", pos)
    line = text[a:b if b >= 0 else len(text)].strip()
    return hashlib.sha1(line.encode()).hexdigest()[:12]


_BASELINES: dict = {}


def load_baseline(path: str = BASELINE) -> dict:
    """(path, number, line hash) -> how many times it is baselined (cached by mtime; callers
    copy it before consuming entries)."""
    key = (path, os.stat(path).st_mtime_ns if os.path.exists(path) else None)
    if key not in _BASELINES:
        _BASELINES[key] = _read_baseline(path)
    return _BASELINES[key]


def _read_baseline(path: str) -> dict:
    out: dict = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                if line.strip() and not line.startswith("#"):
                    key = tuple(line.rstrip("\n").split("\t")[:3])
                    out[key] = out.get(key, 0) + 1
    return out


def check_readme(readme: str, baseline: dict | None = None, untied: list | None = None
                 ) -> list[str]:
    """Every mismatch in one document, one line each ('path: what'). ``untied``: if given, the
    untied numbers are appended to it as (path, number, line hash) instead of being errors
    (how ``--baseline`` collects them)."""
    folder = os.path.dirname(os.path.abspath(readme))
    whole = _is_results_doc(readme)
    if not whole:
        folder = ROOT                       # README.md, docs/*.md: expressions over results/
    rel = os.path.relpath(readme, REPO)
    with open(readme) as f:
        text = f.read()
    prose = prose_text(text)
    spans = _results_spans(text, whole)
    if not whole:                           # checks 2-4 only inside results paragraphs
        keep = np.zeros(len(prose), dtype=bool)
        for a, b in spans:
            keep[a:b] = True
        prose = "".join(c if k or c == "\n" else " " for c, k in zip(prose, keep))
    # declared figures are looked up in the text without its comments (same offsets as prose)
    body = re.sub(r"<!--.*?-->", lambda m: re.sub(r"[^\n]", " ", m.group()), text, flags=re.DOTALL)
    env = _helpers(folder)
    errors, declared, paper = _declarations(text, body, env, rel)
    base = dict(baseline if baseline is not None else load_baseline())

    def _baselined(key, *printed: str) -> bool:
        """A legacy finding kept in the baseline (consumed once), or, when collecting, kept. A
        baselined number must still pass the check that held before issue 54: it occurs, at
        the precision printed, among the numbers of the folder's data files (``printed``:
        the number(s) to look up; default the key's number). So a legacy number that no file
        gives fails, baseline or not. (That check read numbers with a decimal point or a percent
        sign, and range ends; a whole number such as a step count was never looked up.)"""
        if untied is not None:
            untied.append(key)
            return True
        if base.get(key, 0) > 0 and all(_in_data(p, data) for p in printed):
            base[key] -= 1
            return True
        return False

    def covered(a, b):
        return any(s <= a and b <= e for s, e in declared)

    if os.path.abspath(folder) == ROOT:
        folders = [d for d in glob.glob(os.path.join(ROOT, "*")) if os.path.isdir(d)]
    else:
        cited = set(re.findall(r"\.\./([\w.-]+)/", text))
        folders = [folder] + [os.path.join(ROOT, c) for c in sorted(cited)
                              if os.path.isdir(os.path.join(ROOT, c))]
    data = _data_numbers(folders)

    for m in RANGE.finditer(prose):
        lo, hi, pct = m.group(1), m.group(2), m.group(3)
        if not (pct or "%" in m.group() or "." in lo or "." in hi):
            continue
        if not covered(m.start(1), m.end(2)) and not _baselined(
                (rel, f"{lo}-{hi}", _line_key(text, m.start(1))), lo, hi):
            errors.append(f"{rel}: the range '{m.group().strip()}' is not declared (add "
                          "'FIGURE = rng(...)' to the README's <!-- numbers --> block)")

    # check 4: every number of a results paragraph tied to one expression (or exempt)
    tokens = _tokens(prose, spans)
    tied: set[int] = set()
    prev = 0
    for mk in INLINE.finditer(text):
        line_start = text.rfind("\n", 0, mk.start()) + 1
        lo = max(prev, line_start)
        before = [t for t in tokens if lo <= t.start() and t.end() <= mk.start()]
        prev = mk.end()
        kind, arg = mk.group(1), mk.group(2).strip()
        if kind == "from":
            if not arg:
                errors.append(f"{rel}: an empty <!-- from: --> marker (say where the number "
                              "comes from)")
            tied.update(t.start() for t in before)
            continue
        if not re.search(r"[A-Za-z_]", arg):
            errors.append(f"{rel}: <!-- num: {arg} --> is a literal, which ties nothing (a fit "
                          "bar: 'rule: N (what)'; a paper's number: 'paper: N (source)')")
            continue
        try:
            got = _flatten(eval(arg, env))
        except Exception as e:  # noqa: BLE001
            errors.append(f"{rel}: <!-- num: {arg} --> failed: {type(e).__name__}: {e}")
            continue
        if len(got) > len(before):
            errors.append(f"{rel}: <!-- num: {arg} --> gives {len(got)} numbers, the text "
                          f"before it has {len(before)}")
            continue
        mine = before[len(before) - len(got):]
        for t, v in zip(mine, got):
            if not _equal(t.group(), v):
                errors.append(f"{rel}: {t.group()} but <!-- num: {arg} --> gives {v!r}")
            tied.add(t.start())
    # check 2 (a number tied inline to an expression is checked by that expression instead)
    for m in RESULT.finditer(prose):
        printed = m.group(1)
        if covered(m.start(1), m.end(1)) or printed in paper or m.start(1) in tied \
                or _in_data(printed, data):
            continue
        # (no baseline here: this check held for the results READMEs before issue 54)
        line = text.count("\n", 0, m.start()) + 1
        errors.append(f"{rel}:{line}: {printed} is in none of the folder's data files and not "
                      "declared (a derived figure: add it to <!-- numbers -->; a paper's: "
                      "'paper: ...')")

    for t in tokens:
        if t.start() in tied or covered(t.start(), t.end()) or t.group() in paper:
            continue
        result_form = "." in t.group() or re.match(r"x?\s?%", prose[t.end():t.end() + 3])
        if _baselined((rel, t.group(), _line_key(text, t.start())),
                      *([t.group()] if result_form else [])):
            continue
        line = text.count("\n", 0, t.start()) + 1
        errors.append(f"{rel}:{line}: {t.group()} is not tied to an expression (declare it in "
                      "<!-- numbers -->, follow it with <!-- num: EXPR --> or, for a number no "
                      "committed file gives, <!-- from: WHERE -->)")
    return errors


def _declarations(text: str, body: str, env: dict, rel: str):
    """Evaluate the README's <!-- numbers --> blocks: (errors, spans of ``body`` the declared
    figures cover, numbers exempted by paper: / cited: / rule: lines)."""
    errors: list[str] = []
    declared: list[tuple[int, int]] = []
    paper: set[str] = set()
    for block in BLOCK.findall(text):
        for raw in block.splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            kind = line.split(":", 1)[0]
            if kind in ("paper", "cited", "rule") and ":" in line and ":=" not in line:
                numbers, _, source = line.split(":", 1)[1].partition("(")
                if not source.strip():
                    errors.append(f"{rel}: `{line}` names no source: write "
                                  f"'{kind}: N N ... (where they come from)'")
                paper.update(m.group() for m in NUM.finditer(numbers))
                continue
            if ":=" in line:
                name, expr = (s.strip() for s in line.split(":=", 1))
                try:
                    env[name] = eval(expr, env)
                except Exception as e:  # noqa: BLE001
                    errors.append(f"{rel}: `{line}` failed: {type(e).__name__}: {e}")
                continue
            if " = " not in line:
                errors.append(f"{rel}: cannot read `{line}` (want FIGURE = EXPRESSION, "
                              "NAME := EXPRESSION or paper: N N ...)")
                continue
            figure, expr = (s.strip() for s in line.split(" = ", 1))
            # the figure as a whole token: '0.23' must not match inside '10.23'
            pattern = r"(?<![\w.])" * figure[0].isdigit() + re.escape(figure) \
                + r"(?![\w]|\.\d)" * figure[-1].isalnum()
            spans = [(m.start(), m.end()) for m in re.finditer(pattern, body)]
            if not spans:
                errors.append(f"{rel}: declared figure '{figure}' does not occur in the text "
                              "(stale declaration, or the text changed)")
                continue
            declared.extend(spans)
            try:
                got = _flatten(eval(expr, env))
            except Exception as e:  # noqa: BLE001
                errors.append(f"{rel}: '{figure}' = `{expr}` failed: {type(e).__name__}: {e}")
                continue
            printed = [m.group() for m in NUM.finditer(figure)]
            if len(got) != len(printed) or not all(map(_equal, printed, got)):
                shown = ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in got)
                errors.append(f"{rel}: '{figure}' but the data give {shown} (`{expr}`)")

    return errors, declared, paper


def readmes() -> list[str]:
    """The results READMEs, at any depth (every paragraph a results paragraph)."""
    return [os.path.join(ROOT, "README.md")] + sorted(
        p for p in glob.glob(os.path.join(ROOT, "**", "README.md"), recursive=True)
        if os.path.dirname(p) != ROOT)


def documents() -> list[str]:
    """Every checked document: the results READMEs, results/AUDIT.md, README.md, docs/*.md."""
    extra = [os.path.join(ROOT, "AUDIT.md"), os.path.join(REPO, "README.md")]
    extra += sorted(glob.glob(os.path.join(REPO, "docs", "*.md")))
    return readmes() + [p for p in extra if os.path.exists(p)]


def rebaseline(untied: list, old: dict) -> tuple[list, list]:
    """The entries a rewritten baseline may keep: the untied numbers now, each (path, number)
    at most as often as the old baseline held it (an edited line's legacy numbers keep their
    exemption under the line's new hash; a number new to that document does not). Returns
    (kept, refused)."""
    room: dict = {}
    for (path, number, _), k in old.items():
        room[(path, number)] = room.get((path, number), 0) + k
    kept, refused = [], []
    for key in sorted(untied):
        if room.get(key[:2], 0) > 0:
            room[key[:2]] -= 1
            kept.append(key)
        else:
            refused.append(key)
    return kept, refused


def write_baseline(path: str = BASELINE) -> tuple[int, list]:
    """Rewrite the baseline from the documents' untied numbers; it only shrinks
    (:func:`rebaseline`). Returns (entries written, the untied numbers it refused: these must
    be tied)."""
    untied: list = []
    for doc in documents():
        check_readme(doc, untied=untied)
    kept, refused = rebaseline(untied, _read_baseline(path))
    with open(path, "w") as f:
        f.write("# Untied numbers kept from before check 4 (lengen/analysis/numbers.py): path, "
                "number, hash of its line.\n# Only ever shrinks: tie a number and delete its "
                "line; rerun --baseline only to drop fixed entries.\n")
        for key in kept:
            f.write("\t".join(key) + "\n")
    return len(kept), refused


def main(argv: list[str]) -> int:
    if argv == ["--baseline"]:
        n, refused = write_baseline()
        print(f"{n} untied number(s) written to {os.path.relpath(BASELINE, REPO)}")
        for path, number, _ in refused:
            print(f"{path}: {number} is new (not in the old baseline): tie it")
        return 1 if refused else 0
    docs = argv or documents()
    errors = []
    for doc in docs:
        errors += check_readme(doc)
    for e in errors:
        print(e)
    print(f"{len(docs)} document(s) checked, {len(errors)} mismatch(es)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
