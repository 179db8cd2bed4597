"""Accuracy over lengths of the token mixers on parity and even pairs, one panel per task:
each arm's mean over its fitted seeds with the 95% bootstrap interval shaded, read from the
sweeps' ``table.csv`` in results/mixers-chomsky-cpu (written by ``run.sh``, copied there).

    python experiments/mixers-chomsky-cpu/plot.py        # -> results/mixers-chomsky-cpu/curves.png
"""
import os

import matplotlib
import pandas as pd

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = os.path.join("results", "mixers-chomsky-cpu")
PANELS = {"parity check": [("parity", "attention=lstm", "LSTM"),
                           ("parity", "attention=mamba2", "Mamba-2"),
                           ("parity-gdn", "allow_neg_eigval=false", "Gated DeltaNet"),
                           ("parity-gdn", "allow_neg_eigval=true",
                            "Gated DeltaNet, negative eigenvalues")],
          "even pairs": [("even_pairs", "attention=lstm", "LSTM"),
                         ("even_pairs", "attention=mamba2", "Mamba-2"),
                         ("even_pairs", "attention=gated_deltanet", "Gated DeltaNet")]}
TRAIN_MAX = 20


def main():
    fig, axes = plt.subplots(1, len(PANELS), figsize=(11, 3.8), sharey=True)
    for ax, (title, arms) in zip(axes, PANELS.items()):
        for folder, arm, label in arms:
            t = pd.read_csv(os.path.join(HERE, folder, "table.csv"))
            t = t[(t.arm == arm) & t.split.str.startswith("len=")].copy()
            t["length"] = t.split.str[4:].astype(int)
            t = t.sort_values("length")
            k, n = int(t.fit_k.iloc[0]), int(t.fit_n.iloc[0])
            line, = ax.plot(t.length, 100 * t["mean"], marker="o", ms=3,
                            label=f"{label} ({k}/{n} fitted)")
            ax.fill_between(t.length, 100 * t.lo, 100 * t.hi, color=line.get_color(),
                            alpha=0.2)
        ax.axvline(TRAIN_MAX + 0.5, color="grey", ls=":", lw=1)
        ax.set_title(title)
        ax.set_xlabel("input length (trained on 1..20)")
        ax.legend(fontsize=7, loc="lower left")
    axes[0].set_ylabel("token accuracy, % (mean of fitted seeds, 95% CI)")
    fig.tight_layout()
    out = os.path.join(HERE, "curves.png")
    fig.savefig(out, dpi=120)
    print("wrote", out)


if __name__ == "__main__":
    main()
