"""A train run's curves, drawn with matplotlib to SVG (embedded in the viewer's index page).

One panel per quantity of ``metrics.jsonl``'s train rows, one line per harness where the
loop logs a per-harness key (``reward_mean/<harness>``, ``pass_rate/<harness>``) and the
run-wide line otherwise: reward, pass rate (pass@1 of the step's samples; the loop logs the
exact-pass fraction), tree compression, logprob mismatch (trainer vs rollout engine), KL,
entropy. The held-out evaluation reward is drawn on the reward panel.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from typing import Any

__all__ = ["CURVES", "curves_svg"]

#: (title, metric key prefix) per panel.
CURVES: tuple[tuple[str, str], ...] = (
    ("reward (mean per step)", "reward_mean"),
    ("pass rate (reward = 1)", "pass_rate"),
    ("tree compression (flat / tree tokens)", "tree_compression"),
    ("logprob mismatch |log π_train − log π_rollout|", "mean_abs_logprob_diff"),
    ("KL", "kl"),
    ("entropy (−mean sampled logprob)", "entropy_estimate"),
)


def _series(rows: Sequence[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for r in rows:
        v = r.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool) and v == v:
            xs.append(int(r["step"]))
            ys.append(float(v))
    return xs, ys


def curves_svg(rows: Sequence[dict[str, Any]]) -> str:
    """The SVG text of the run's curves (``""`` when it has no train rows)."""
    train = [r for r in rows if r.get("kind") == "train" and "step" in r]
    if not train:
        return ""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    harnesses = sorted(
        {k.split("/", 1)[1] for r in train for k in r if k.startswith("reward_mean/")}
    )
    evals = [r for r in rows if r.get("kind") == "eval" and "step" in r]
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5))
    for ax, (title, key) in zip(axes.flat, CURVES, strict=True):
        per = [f"{key}/{h}" for h in harnesses if any(f"{key}/{h}" in r for r in train)]
        for k in per or [key]:
            xs, ys = _series(train, k)
            if xs:
                ax.plot(xs, ys, marker="o", ms=3, label=k.split("/", 1)[-1] if per else key)
        if key == "reward_mean":
            xs, ys = _series(evals, "eval_reward")
            if xs:
                ax.plot(xs, ys, marker="s", ms=3, ls="--", label="held-out eval")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("RL step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if ax.lines:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    buf = io.StringIO()
    matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text (small, selectable)
    fig.savefig(buf, format="svg")
    plt.close(fig)
    svg = buf.getvalue()
    return re.sub(r"^<\?xml[^>]*>\s*(<!DOCTYPE[^>]*>\s*)?", "", svg)
