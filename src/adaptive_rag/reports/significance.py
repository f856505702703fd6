"""Word significance in one generated sentence, ATTN vs SCW (SCAAR Figure 3), drawn from the rows
`methods.parts.significance` computed: this module only writes the table and the figure."""

from __future__ import annotations

from pathlib import Path

from ..io import atomic_write
from .figures import save


def write_significance(sentence: str, rows: list[dict], csv: Path, png: Path, question: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd
    import seaborn as sns

    frame = pd.DataFrame(rows)
    with atomic_write(csv) as handle:
        frame.to_csv(handle, index=False, float_format="%.4f", lineterminator="\n")
    long = frame.melt(id_vars=["position", "word"], value_vars=["ATTN", "SCW"], var_name="weighting",
                      value_name="weight")
    long["label"] = long["position"].astype(str) + " " + long["word"]
    sns.set_theme(style="whitegrid")
    figure, ax = plt.subplots(figsize=(max(6.0, 0.75 * len(frame) + 2), 4.2))
    sns.barplot(data=long, x="label", y="weight", hue="weighting", ax=ax)
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xlabel("word of the look-ahead sentence")
    ax.set_ylabel("normalised weight r'(w) (mean 1)")
    ax.set_xticks(ax.get_xticks(), [t.get_text().split(" ", 1)[1] for t in ax.get_xticklabels()], rotation=45,
                  ha="right")
    ax.set_title(f"Q: {question}\nsentence: {sentence}", fontsize=9)
    figure.tight_layout()
    save(figure, png)
