"""Per-step metrics: JSONL (always), TensorBoard and W&B (optional), PNG curves (matplotlib)."""

from __future__ import annotations

import json
import math
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from clawrl.rl_core.errors import ConfigError

__all__ = ["MetricsLog", "plot_curves", "read_jsonl"]


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a JSONL file; a torn last line (a killed writer) is skipped."""
    rows: list[dict[str, Any]] = []
    p = Path(path)
    if not p.exists():
        return rows
    for line in p.read_text().splitlines():
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def _finite(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


class MetricsLog:
    """Appends one JSON object per line to ``<out>/metrics.jsonl`` (flushed per row) and
    mirrors numeric values to TensorBoard when ``tensorboard`` is set, and to Weights & Biases
    when ``wandb`` is ``"offline"`` or ``"online"``: one W&B run per output folder (its id
    is kept in ``<out>/wandb/run-id``, so a resumed run continues it), the run config as
    its config, each row's numbers under ``<kind>/<key>``.

    Raises:
        ConfigError: TensorBoard or W&B requested but its package is missing.
    """

    def __init__(
        self,
        out: str | Path,
        *,
        tensorboard: bool = False,
        wandb: str = "",
        wandb_project: str = "clawrl",
        config: Mapping[str, Any] | None = None,
    ) -> None:
        self.path = Path(out) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tb: Any = None
        self._wandb: Any = None
        if wandb:
            self._wandb = _wandb_run(Path(out), wandb, wandb_project, config)
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as exc:
                raise ConfigError(
                    "logging.tensorboard = true needs the tensorboard package"
                ) from exc
            self._tb = SummaryWriter(str(Path(out) / "tensorboard"))

    def write(self, row: Mapping[str, Any]) -> None:
        clean = {k: _finite(v) for k, v in row.items()}
        with self.path.open("a") as f:
            f.write(json.dumps(clean, sort_keys=True) + "\n")
            f.flush()
        if self._tb is not None:
            step = int(row.get("step", 0))
            for k, v in row.items():
                if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
                    self._tb.add_scalar(f"{row.get('kind', 'train')}/{k}", v, step)
            self._tb.flush()
        if self._wandb is not None:
            kind = row.get("kind", "train")
            numbers = {
                f"{kind}/{k}": v
                for k, v in row.items()
                if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
            }
            if numbers:
                self._wandb.log(numbers)

    def supersede_after(self, step: int) -> int:
        """On resume from the checkpoint of RL step ``step``: move the ``train`` / ``eval``
        rows of later steps (written by the interrupted process, about to run again) to
        ``metrics.superseded.jsonl``, so that ``metrics.jsonl`` has each step once. Rewrites
        the file atomically; returns how many rows moved."""
        if not self.path.exists():
            return 0
        rows = read_jsonl(self.path)

        def rerun(r: dict[str, Any]) -> bool:
            return r.get("kind") in ("train", "eval") and int(r.get("step", 0)) > step

        later = [r for r in rows if rerun(r)]
        if not later:
            return 0
        with (self.path.parent / "metrics.superseded.jsonl").open("a") as f:
            f.writelines(json.dumps(r, sort_keys=True) + "\n" for r in later)
        tmp = self.path.with_suffix(".jsonl.tmp")
        tmp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows if not rerun(r)))
        os.replace(tmp, self.path)
        return len(later)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self._wandb is not None:
            import wandb

            self._wandb.finish()
            wandb.teardown()  # waits until the service has written the run to disk
            self._wandb = None


def _wandb_run(out: Path, mode: str, project: str, config: Mapping[str, Any] | None) -> Any:
    """A W&B run in ``<out>/wandb``, resumed when the folder already holds one."""
    try:
        import wandb
    except ImportError as exc:
        raise ConfigError(
            "[logging] wandb needs the wandb package (pip install 'clawrl-rl-core[wandb]')"
        ) from exc
    folder = out / "wandb"
    folder.mkdir(parents=True, exist_ok=True)
    id_file = folder / "run-id"
    run_id = id_file.read_text().strip() if id_file.exists() else secrets.token_hex(8)
    id_file.write_text(run_id + "\n")
    return wandb.init(
        project=project,
        dir=str(out),
        mode="online" if mode == "online" else "offline",
        id=run_id,
        resume="allow",
        name=out.name,
        config=dict(config or {}),
        settings=wandb.Settings(silent=True, console="off"),
    )


def plot_curves(rows: list[dict[str, Any]], path: str | Path) -> Path:
    """Draw the run's curves into one PNG: reward per harness and held-out eval reward,
    pass rate, logprob mismatch, grad norm, entropy / KL, seconds per phase."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [r for r in rows if r.get("kind") == "train"]
    evals = [r for r in rows if r.get("kind") == "eval"]
    sft = [r for r in rows if r.get("kind") == "sft"]
    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    ax = axes[0][0]
    harnesses = sorted(
        {k.split("/", 1)[1] for r in train for k in r if k.startswith("reward_mean/")}
    )
    for h in harnesses:
        xs = [r["step"] for r in train if f"reward_mean/{h}" in r]
        ax.plot(
            xs,
            [r[f"reward_mean/{h}"] for r in train if f"reward_mean/{h}" in r],
            marker="o",
            label=f"train reward ({h})",
        )
    for key, marker, style, label in (
        ("eval_reward", "s", "--", "held-out eval reward"),
        ("eval_greedy_reward", "^", ":", "held-out eval reward, greedy"),
    ):
        pts = [r for r in evals if r.get(key) is not None]
        if pts:
            ax.plot(
                [r["step"] for r in pts],
                [r[key] for r in pts],
                marker=marker,
                linestyle=style,
                label=label,
            )
    ax.set_title("reward")
    ax.set_xlabel("RL step (0 = after cold start)")
    ax.set_ylim(-0.05, 1.05)
    ax.legend(fontsize=8)

    def line(a: Any, key: str, title: str, data: list[dict[str, Any]] = train) -> None:
        xs = [r["step"] for r in data if r.get(key) is not None]
        a.plot(xs, [r[key] for r in data if r.get(key) is not None], marker=".", label=key)
        a.set_title(title)
        a.set_xlabel("step")

    line(axes[0][1], "pass_rate", "pass rate (reward = 1)")
    line(axes[0][2], "mean_abs_logprob_diff", "|log π_train − log π_rollout| (mean)")
    line(axes[1][0], "grad_norm", "grad norm")
    line(axes[1][1], "entropy_estimate", "entropy (−mean sampled logprob) / KL")
    line(axes[1][1], "kl", "entropy (−mean sampled logprob) / KL")
    axes[1][1].legend(fontsize=8)
    a = axes[1][2]
    for ph in ("rollout", "verify", "trees", "update", "sync", "eval"):
        key = f"time/{ph}"
        xs = [r["step"] for r in train if key in r]
        if xs:
            a.plot(xs, [r[key] for r in train if key in r], marker=".", label=ph)
    a.set_title("seconds per phase")
    a.legend(fontsize=8)
    if sft:
        axes[1][0].plot(
            [r["sft_step"] for r in sft],
            [r["loss"] for r in sft],
            alpha=0.4,
            label="cold-start SFT loss (x = SFT step)",
        )
        axes[1][0].legend(fontsize=8)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out
