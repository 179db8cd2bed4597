"""The bench scorecard: one row per variant x cell (fitted or not, the in-distribution figure,
the OOD score), the committed baselines beside the user's variants, and the published number
where a paper has one for that cell and baseline; written as ``scorecard.md / .csv / .json`` and
``scorecard.png`` (variants x cells, colour = OOD score, an x where the model did not fit its
training distribution, so its OOD number does not count; grey where the variant cannot run)."""
from __future__ import annotations

import csv
import io
import os

import numpy as np

from lengen.analysis.tables import markdown_table
from lengen.bench.battery import CELLS, CHOMSKY, VERSION, score
from lengen.fileio import save_json_atomic, savefig_atomic, write_text_atomic
from lengen.recipes.randomized_pe.published import PAPER_TABLE4
from lengen.recipes.tra_flipflop.published import PAPER_TABLE1

FIELDS = ["variant", "cell", "family", "status", "fitted", "seen", "ood", "paper_ood", "source",
          "scale", "bench_version", "reason"]


def published(label: str, cell: str) -> float | None:
    """The paper's OOD figure for a baseline on a cell, on the cell's own scale (0..1), where a
    paper reports one: flip-flop (TRA paper Table 1: mean of sparse and dense, four seeds) and
    the Chomsky cells (Ruoss et al. Table 4: mean over 10 seeds at the best lr, lengths 41..500).
    The papers' lengths and budgets are larger than the cpu scale's (see the battery)."""
    if cell == "flipflop":
        if label in PAPER_TABLE1["dense"]:
            return (PAPER_TABLE1["sparse"][label][0] + PAPER_TABLE1["dense"][label][0]) / 200
    if cell in CHOMSKY:
        key = {"NoPE": "none", "RoPE": "rope", "ALiBi": "alibi", "Rand. RoPE": "rand_rope"}
        if label in key:
            return PAPER_TABLE4[CHOMSKY[cell]][key[label]][0] / 100
    return None


def scorecard_rows(result, specs, na: list[dict], scale: str) -> list[dict]:
    """Rows of the scorecard from a sweep result (its runs' evaluation rows) and the n/a rows."""
    by_run: dict[str, list[dict]] = {}
    for r in result.rows:
        by_run.setdefault(r["run"], []).append(r)
    rows = []
    for spec in specs:
        label, cell = spec.tags["variant"], spec.tags["cell"]
        status = result.status.get(spec.name, {}).get("status")
        base = {"variant": label, "cell": cell, "family": CELLS[cell][0], "scale": scale,
                "bench_version": VERSION, "paper_ood": published(label, cell),
                "source": CELLS[cell][1]}
        if status not in ("done", "cached"):
            err = result.status.get(spec.name, {}).get("error") or "not run"
            rows.append(dict(base, status="failed", reason=str(err).splitlines()[0]))
            continue
        s = score(cell, scale, by_run.get(spec.name, []))
        rows.append(dict(base, status="ok" if s["fitted"] else "not fitted", **s,
                         reason="" if s["fitted"] else "did not fit its training distribution"))
    for r in na:
        rows.append(dict(r, family=CELLS[r["cell"]][0], scale=scale, bench_version=VERSION,
                         paper_ood=None, source=CELLS[r["cell"]][1]))
    return rows


def baseline_path(scale: str) -> str:
    """Where the committed baseline scorecard of ``scale`` lives in a lengen checkout."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return os.path.join(root, "results", f"bench-{scale}", "scorecard.csv")


def read_scorecard(path: str) -> list[dict]:
    def conv(k, v):
        if k in ("seen", "ood", "paper_ood"):
            return float(v) if v not in ("", "None") else None
        if k == "fitted":                      # empty for n/a and failed cells
            return {"True": True, "False": False}.get(v)
        if k == "bench_version":
            return int(v)
        return v

    with open(path, newline="") as f:
        return [{k: conv(k, v) for k, v in row.items()} for row in csv.DictReader(f)]


def _fmt(x, pct=True) -> str:
    if x is None or x != x:
        return "-"
    return f"{100 * x:.1f}" if pct else f"{x:.2f}"


def write_scorecard(rows: list[dict], out: str, scale: str, *, baselines: str | None = "default",
                    log=print) -> list[str]:
    """Write the scorecard files into ``out``; rows of the committed baselines (``baselines``:
    ``default`` = :func:`baseline_path`, a path, or None) are added for variants not run here,
    marked as baselines. Returns the paths written."""
    os.makedirs(out, exist_ok=True)
    own = {r["variant"] for r in rows}
    base_rows, note = [], ""
    path = baseline_path(scale) if baselines == "default" else baselines
    if path and os.path.isfile(path):
        base_rows = [dict(r, baseline=True) for r in read_scorecard(path)
                     if r["variant"] not in own]
        versions = {r["bench_version"] for r in base_rows}
        if versions - {VERSION}:
            note = (f"Baselines from {path} were made with battery version(s) "
                    f"{sorted(versions)}; this is version {VERSION}: compare with care.")
        else:
            note = f"Baselines (marked *) read from {path}, not retrained."
    elif baselines == "default":
        note = f"No committed baselines at scale {scale} ({path} is absent)."
    all_rows = rows + base_rows
    variants = list(dict.fromkeys(r["variant"] for r in all_rows))
    cells = [c for c in CELLS if any(r["cell"] == c for r in all_rows)]
    cellrow = {(r["variant"], r["cell"]): r for r in all_rows}

    def show(r):
        if r is None:
            return ""
        if r["status"] == "n/a":
            return "n/a"
        if r["status"] == "failed":
            return "failed"
        txt = _fmt(r["ood"], pct=r["cell"] != "lm") if r["cell"] != "lm" else _fmt(r["ood"], False)
        if r["status"] == "not fitted":
            txt += " ‡"
        if r.get("paper_ood") is not None:
            txt += f" ({_fmt(r['paper_ood'])})"
        return txt

    grid = [["variant"] + cells]
    for v in variants:
        star = " *" if any(r.get("baseline") for r in all_rows if r["variant"] == v) else ""
        grid.append([v + star] + [show(cellrow.get((v, c))) for c in cells])
    caption = (f"lengen bench v{VERSION}, scale {scale}. OOD score per cell (higher is better, "
               f"100 = nothing lost outside the training distribution; lm: ppl(1x)/ppl(8x)). "
               f"‡ = did not fit its training distribution (its OOD number does not count); "
               f"(x) = the paper's figure for that baseline. Cells: "
               + "; ".join(f"{c}: {CELLS[c][2]} ({CELLS[c][1]})" for c in cells) + ".")
    md = os.path.join(out, "scorecard.md")
    write_text_atomic(f"**Scorecard**\n\n{caption}\n\n"
                      f"{markdown_table(grid, align='l' + 'r' * len(cells))}\n\n{note}\n", md)
    csv_path = os.path.join(out, "scorecard.csv")
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=FIELDS, extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)                          # the baselines stay in their own file
    write_text_atomic(buf.getvalue(), csv_path)
    js = os.path.join(out, "scorecard.json")
    save_json_atomic({"version": VERSION, "scale": scale, "rows": rows,
                      "baselines": base_rows, "note": note}, js)
    png = os.path.join(out, "scorecard.png")
    _figure(variants, cells, cellrow, png, scale)
    for p in (md, csv_path, js, png):
        log(f"wrote {p}")
    return [md, csv_path, js, png]


def _figure(variants, cells, cellrow, path, scale) -> None:
    import matplotlib  # slow import: drawing only

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # slow import: drawing only


    vals = np.full((len(variants), len(cells)), np.nan)
    fig, ax = plt.subplots(figsize=(1.1 * len(cells) + 2.5, 0.5 * len(variants) + 1.8))
    for i, v in enumerate(variants):
        for j, c in enumerate(cells):
            r = cellrow.get((v, c))
            if r is None:
                continue
            if r["status"] in ("ok", "not fitted") and r["ood"] is not None:
                vals[i, j] = min(1.0, max(0.0, r["ood"]))
    ax.imshow(np.ma.masked_invalid(vals), cmap="viridis", vmin=0, vmax=1, aspect="auto")
    ax.set_facecolor("#d0d0d0")
    for i, v in enumerate(variants):
        for j, c in enumerate(cells):
            r = cellrow.get((v, c))
            if r is None:
                continue
            if r["status"] == "not fitted":
                ax.plot(j, i, marker="x", color="red", markersize=14, mew=2)
            label = {"n/a": "n/a", "failed": "fail"}.get(r["status"])
            if label is None and r.get("ood") is not None:
                label = f"{100 * r['ood']:.0f}"
            dark = r["status"] in ("ok", "not fitted") and (vals[i, j] < 0.6)   # viridis
            ax.text(j, i, label or "", ha="center", va="center", fontsize=8,
                    color="white" if dark else "black")
    ax.set_xticks(range(len(cells)), cells, rotation=30, ha="right")
    ax.set_yticks(range(len(variants)), variants)
    ax.set_title(f"lengen bench v{VERSION} ({scale}): OOD score; x = did not fit")
    fig.tight_layout()
    savefig_atomic(fig, path, dpi=110)
    plt.close(fig)


__all__ = ["scorecard_rows", "write_scorecard", "read_scorecard", "baseline_path", "published"]
