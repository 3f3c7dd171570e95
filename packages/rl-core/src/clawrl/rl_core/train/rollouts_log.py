"""Per-step rollout files of a train run: ``<out>/rollouts/step-NNNN.jsonl``.

One line per rollout of the step: bench's :class:`~clawrl.bench.RolloutResult` without its
call records (those are in ``<out>/capture/``) and without the harness's raw stdout/stderr
(its logs stay), plus ``step`` (1-based, as in ``metrics.jsonl``), ``trained`` (the rollout
is in the step's trees) and ``advantage``: with ``algo.name = "grpo"`` the rollout's GRPO
advantage (:func:`clawrl.rl_core.grpo_advantages` over the trained rollouts' rewards and
groups, as the update computes it; every trajectory of the rollout shares it), else
``None`` (PPO's advantages are per token, from the value model, and not written). bench's
viewer (``bench view``) reads these files.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import orjson
from clawrl.bench import RolloutResult
from clawrl.rl_core.advantages import grpo_advantages
from clawrl.rl_core.config import GRPOConfig
from clawrl.rl_core.train.trees import BuiltTrees

__all__ = ["write_step_rollouts"]


def write_step_rollouts(
    out: str | Path,
    step: int,
    results: Sequence[RolloutResult],
    built: BuiltTrees,
    grpo: GRPOConfig | None,
) -> Path:
    """Write ``<out>/rollouts/step-<step:04d>.jsonl`` (see the module docstring); ``grpo``:
    the GRPO settings when the run trains with GRPO, else ``None``. Returns the path."""
    adv: dict[str, float] = {}
    ids = [r for r in built.rewards if r in built.groups]
    if grpo is not None and ids:
        values = grpo_advantages(
            np.asarray([built.rewards[r] for r in ids], dtype=np.float64),
            [built.groups[r] for r in ids],
            scale_by_std=grpo.scale_by_std,
            eps=grpo.eps,
        )
        adv = {r: float(a) for r, a in zip(ids, values, strict=True)}
    path = Path(out) / "rollouts" / f"step-{step:04d}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        for x in results:
            row = x.model_dump(mode="json", exclude={"records", "stdout", "stderr"})
            row.update(step=step, trained=x.rollout_id in built.groups)
            row["advantage"] = adv.get(x.rollout_id)
            f.write(orjson.dumps(row) + b"\n")
    return path
