"""Report of the TRA Appendix B reproduction: Table 2 (perplexity at the training length, ours
beside the published) and Fig. 4 (perplexity vs evaluation length: a table with each model's
trend and the paper's reading, the finding in words, and the plot). Reads rows, never trains."""
from __future__ import annotations

import math
import os

from lengen.analysis.perplexity_plot import plot_perplexity
from lengen.analysis.tables import markdown_table
from lengen.fileio import rows_to_csv, write_csv_atomic, write_text_atomic
from lengen.recipes.lm import (BLOW_UP_RATIO, KEEP_RATIO, eval_lengths, fmt_ppl,
                               holds_to, perplexity_table, trend)
from lengen.recipes.tra_wikitext.published import (PAPER_FIG4, PAPER_GENERALISE,
                                                   PAPER_HOLDS_TO_10X, PAPER_TABLE2)
from lengen.recipes.tra_wikitext.specs import SCALES

#: a model whose perplexity at the training length exceeds FIT_FACTOR x the best model's is
#: marked: it did not fit its training distribution as the others did, so its curve says little
FIT_FACTOR = 1.5
NOT_FIT = "†"
KEEPS = ("improves", "keeps")


def records(rows: list[dict], models: list[str], train_length: int) -> list[dict]:
    """One record per model: perplexity per length (mean/std/n over seeds), the trend, the
    published Table 2 and the paper's reading of Fig. 4."""
    table = perplexity_table(rows)
    at_T = [table[m][train_length]["mean"] for m in models
            if m in table and train_length in table[m]]
    best = min(at_T) if at_T else math.nan
    out = []
    for m in models:
        curve = table.get(m, {})
        means = {k: v["mean"] for k, v in curve.items()}
        ratio, label = trend(means, train_length)
        base = means.get(train_length, math.nan)
        p_mean, p_std = PAPER_TABLE2[m]
        out.append({"model": m, "ppl": curve, "ratio": ratio, "trend": label,
                    "holds_to": holds_to(means, train_length),
                    "n_seeds": max((v["n"] for v in curve.values()), default=0),
                    "fit": bool(math.isfinite(base) and base <= FIT_FACTOR * best),
                    "paper_mean": p_mean, "paper_std": p_std, "paper_fig4": PAPER_FIG4[m]})
    return out


def finding(recs: list[dict]) -> str:
    """Whether the paper's qualitative finding appears in ours, in words."""
    by = {r["model"]: r for r in recs if r["n_seeds"]}
    gen = [m for m in PAPER_GENERALISE if m in by]
    pes = [m for m in by if m not in PAPER_GENERALISE + PAPER_HOLDS_TO_10X]
    if not gen or not pes:
        return ("Finding: not assessable (needs FoT or TRA and at least one of the other "
                "position-encoding models).")
    kept = [m for m in gen if by[m]["trend"] in KEEPS]
    worse = [m for m in pes if by[m]["trend"] in ("degrades", "blows up")]
    blown = [m for m in pes if by[m]["trend"] == "blows up"]
    unfit = [m for m in by if not by[m]["fit"]]

    def names(ms):
        return ", ".join(f"{m} ({by[m]['ratio']:.2f}x)" for m in ms) or "none"

    appears = len(kept) == len(gen) and 2 * len(worse) > len(pes)
    text = (f"Paper (Fig. 4): FoT and TRA keep or improve their perplexity up to 32x the "
            f"training length, CoPE holds to ~10x, most other position encodings decline "
            f"rapidly. Ours (ratio of the perplexity at the longest length to the one at the "
            f"training length): keep or improve (<= {KEEP_RATIO:g}x): "
            f"{names([m for m in by if by[m]['trend'] in KEEPS])}; degrade or blow up: "
            f"{names([m for m in by if by[m]['trend'] in ('degrades', 'blows up')])} (blow up, "
            f"> {BLOW_UP_RATIO:g}x: {', '.join(blown) or 'none'}). ")
    if appears:
        text += (f"The finding appears: {' and '.join(gen)} keep or improve while "
                 f"{len(worse)} of the {len(pes)} other position encodings degrade.")
    else:
        missing = [m for m in gen if m not in kept]
        text += ("The finding does not appear: "
                 + (f"{', '.join(missing)} did not keep its perplexity" if missing else "")
                 + ("; " if missing and 2 * len(worse) <= len(pes) else "")
                 + (f"only {len(worse)} of the {len(pes)} other position encodings degrade"
                    if 2 * len(worse) <= len(pes) else "") + ".")
    for m in [m for m in PAPER_HOLDS_TO_10X if m in by]:
        x = by[m]["holds_to"]
        text += (f" {m} keeps its perplexity (<= {KEEP_RATIO:g}x) up to {x:g}x the training "
                 f"length (paper: ~10x, then deteriorates)." if math.isfinite(x) else "")
    if "TRA" in by and "FoT" in by:
        both = sorted(set(by["TRA"]["ppl"]) & set(by["FoT"]["ppl"]))
        edge = sum(by["TRA"]["ppl"][k]["mean"] < by["FoT"]["ppl"][k]["mean"] for k in both)
        text += (f" TRA is below FoT at {edge} of {len(both)} lengths (paper: \"a consistent "
                 f"perplexity edge\").")
    if unfit:
        text += (f" {NOT_FIT} {', '.join(unfit)}: perplexity at the training length above "
                 f"{FIT_FACTOR:g}x the best model's (did not fit its training distribution as the "
                 f"others did; read its curve with care).")
    return text


def caption_for(scale: str, seeds, rel: str, data_caption: str,
                wall_seconds: float | None = None) -> str:
    s = SCALES[scale]
    lens = eval_lengths(s)
    cap = (f"TRA paper Appendix B reproduction ({scale} scale). Data: {data_caption}. Model: "
           f"{s['n_layers']} layer(s), {s['n_heads']} heads, d_model {s['d_model']}, SwiGLU MLP "
           f"{2 * s['d_model']}, RMSNorm pre-norm; trained {s['steps']:,} steps at batch "
           f"{s['batch_size']} x {s['seq_len']} tokens, AdamW lr {s['lr']:g}, cosine decay; "
           f"{len(seeds)} seed(s) {list(seeds)}. Evaluation lengths {', '.join(map(str, lens))}"
           f" (training window {s['seq_len']}); "
           + ("the whole split at every length" if s["max_eval_tokens"] >= 10 ** 8
              else f"at most {s['max_eval_tokens']:,} scored targets per length")
           + f". REL = {'T5 bucketed bias' if rel == 't5' else 'Transformer-XL relative'}. "
           f"Published: WikiText-103 test, GPT-2 tokenizer, 8 layers x 512, 100k steps at batch "
           f"64, four seeds.")
    if scale != "paper":
        cap += (" Corpus, tokenizer and model differ from the paper's, so perplexities are not "
                "comparable in absolute terms; compare the models' order and trends.")
    if wall_seconds is not None:
        cap += f" Wall time of this invocation: {wall_seconds / 60:.1f} min."
    return cap


def table2_markdown(recs: list[dict], train_length: int, caption: str) -> str:
    grid = [["Model"] + [r["model"] for r in recs]]
    cells = []
    for r in recs:
        v = r["ppl"].get(train_length)
        ours = fmt_ppl(v["mean"], v["std"]) if v else "failed"
        mark = NOT_FIT if v and not r["fit"] else ""
        cells.append(f"{ours}{mark} (paper {r['paper_mean']:.2f} ± {r['paper_std']:.2f})")
    grid.append([f"Perplexity (len={train_length})"] + cells)
    text = "**Table 2** " + caption + "\n\n" + markdown_table(grid)
    if any(r["n_seeds"] and not r["fit"] for r in recs):
        text += (f"\n\n{NOT_FIT} perplexity above {FIT_FACTOR:g}x the best model's at the training "
                 f"length: did not fit its training distribution as the others did.")
    return text + "\n"


def fig4_markdown(recs: list[dict], lengths: list[int], train_length: int,
                  caption: str) -> str:
    grid = [["Model"] + [f"len={k}" for k in lengths]
            + [f"{max(lengths) // train_length}x / 1x", "ours", "paper (Fig. 4)"]]
    for r in recs:
        row = [r["model"] + ("" if r["fit"] or not r["n_seeds"] else NOT_FIT)]
        for k in lengths:
            v = r["ppl"].get(k)
            row.append(fmt_ppl(v["mean"], v["std"]) if v else "-")
        row += ["-" if math.isnan(r["ratio"]) else f"{r['ratio']:.2f}", r["trend"],
                r["paper_fig4"]]
        grid.append(row)
    return ("**Fig. 4 (as a table)** Perplexity vs evaluation length. " + caption + "\n\n"
            + markdown_table(grid) + "\n\n" + finding(recs) + "\n")


def plot_fig4(rows, out: str, train_length: int, title: str) -> str:
    plot_perplexity(rows, out, by=("model",), train_length=train_length, title=title,
                    label=lambda key: key[0])
    return out


def write_report(rows: list[dict], out_dir: str, *, scale: str, models: list[str],
                 rel: str = "t5", seeds=None, data_caption: str = "",
                 wall_seconds: float | None = None, log=print):
    """Write table2.md/.csv, fig4.md/.csv and fig4.png to ``out_dir``; returns (records, paths)."""
    s = SCALES[scale]
    T, lengths = s["seq_len"], eval_lengths(s)
    seeds = seeds if seeds is not None else sorted({r.get("seed") for r in rows if "seed" in r})
    recs = records(rows, models, T)
    caption = caption_for(scale, seeds, rel, data_caption, wall_seconds)
    paths = {k: os.path.join(out_dir, f) for k, f in (
        ("table2_md", "table2.md"), ("table2_csv", "table2.csv"), ("fig4_md", "fig4.md"),
        ("fig4_csv", "fig4.csv"), ("fig4_png", "fig4.png"))}
    t2 = table2_markdown(recs, T, caption)
    f4 = fig4_markdown(recs, lengths, T, caption)
    write_text_atomic(t2, paths["table2_md"])
    write_text_atomic(f4, paths["fig4_md"])
    flat = []
    for r in recs:
        v = r["ppl"].get(T, {})
        flat.append({"model": r["model"], "ours_mean": v.get("mean", math.nan),
                     "ours_std": v.get("std", math.nan), "n_seeds": r["n_seeds"],
                     "paper_mean": r["paper_mean"], "paper_std": r["paper_std"],
                     "fit": r["fit"]})
    write_csv_atomic(flat, paths["table2_csv"])
    curve_rows = [{"model": r["model"], "length": k, "ppl_mean": v["mean"], "ppl_std": v["std"],
                   "n_seeds": v["n"], "ratio_longest": r["ratio"], "trend": r["trend"],
                   "paper_fig4": r["paper_fig4"]}
                  for r in recs for k, v in sorted(r["ppl"].items())]
    write_text_atomic(rows_to_csv(curve_rows) if curve_rows else "", paths["fig4_csv"])
    if any(r["n_seeds"] for r in recs):
        plot_fig4([r for r in rows if r.get("model") in models], paths["fig4_png"], T,
                  f"TRA Fig. 4, {scale} scale: perplexity vs length")
    else:
        paths.pop("fig4_png")
    log("\n" + t2 + "\n" + f4)
    log("wrote " + ", ".join(paths.values()))
    return recs, paths


__all__ = ["records", "finding", "caption_for", "table2_markdown", "fig4_markdown",
           "write_report", "FIT_FACTOR", "NOT_FIT"]
