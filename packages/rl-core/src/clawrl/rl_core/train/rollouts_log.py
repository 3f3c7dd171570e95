"""Per-step rollout files of a train run: ``<out>/rollouts/step-NNNN.jsonl``, and one per
held-out evaluation: ``<out>/rollouts/eval-<tag>.jsonl``.

One line per rollout of the step: bench's :class:`~clawrl.bench.RolloutResult` without its
call records (those are in ``<out>/capture/``) and without the harness's raw stdout/stderr
(its logs stay), plus:

- ``step`` (1-based, as in ``metrics.jsonl``) and ``trained`` (the rollout is in the step's
  trees);
- ``tokens``: per trajectory of the rollout that was trained, keyed by its leaf call id, the
  trained tokens as the update saw them — ``position`` (depth on the path, 0 = the root
  token), ``advantage`` (A, per token), ``importance_weight`` (the correction factor c folded
  into the loss weight: TIS weight of π_old / π_rollout, 0 where a ratio mask drops the
  token; see :class:`~clawrl.rl_core.PreparedRL`), ``old_logprob`` (π_old, the trainer's
  own pass) and ``rollout_logprob`` (what the engine reported): float lists aligned with
  ``position``. From the step's last update (``algo.updates_per_step`` > 1: the last);
- ``advantage``: the rollout's advantage when all its trained tokens share one (GRPO), else
  ``None`` (PPO's advantages vary per token: see ``tokens``).

bench's viewer (``bench view``) reads these files.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from clawrl.bench import RolloutResult, json_bytes
from clawrl.rl_core.packing import TreeBatch
from clawrl.rl_core.step import OldPass, PreparedRL
from clawrl.rl_core.train.trees import BuiltTrees

__all__ = ["trained_tokens", "write_eval_rollouts", "write_step_rollouts"]

_FIELDS = ("advantage", "importance_weight", "old_logprob", "rollout_logprob")


def trained_tokens(
    batch: TreeBatch, prepared: PreparedRL, old: OldPass
) -> dict[str, dict[str, dict[str, list[Any]]]]:
    """``{rollout_id: {leaf_call_id: {"position": [...], "advantage": [...], ...}}}``: every
    membership of the update's batch, by trajectory (see the module docstring)."""
    m_tok = np.asarray(batch.mem_token, dtype=np.int64)
    values = {
        "advantage": prepared.advantage,
        "importance_weight": prepared.importance_weight,
        "old_logprob": np.asarray(old.logprobs)[m_tok],
        "rollout_logprob": np.asarray(batch.mem_logprob),
    }
    positions = np.asarray(batch.position_ids, dtype=np.int64)[m_tok]
    out: dict[str, dict[str, dict[str, list[Any]]]] = {}
    for m, k in enumerate(np.asarray(batch.mem_traj, dtype=np.int64)):
        traj = batch.trajectories[int(k)]
        row = out.setdefault(traj.rollout_id, {}).setdefault(
            traj.leaf_call_id, {"position": [], **{f: [] for f in _FIELDS}}
        )
        row["position"].append(int(positions[m]))
        for f in _FIELDS:
            v = values[f]
            row[f].append(None if v is None else round(float(v[m]), 6))
    return out


def _rollout_advantage(tokens: dict[str, dict[str, list[Any]]] | None) -> float | None:
    if not tokens:
        return None
    seen = {a for row in tokens.values() for a in row["advantage"]}
    return seen.pop() if len(seen) == 1 and None not in seen else None


def write_step_rollouts(
    out: str | Path,
    step: int,
    results: Sequence[RolloutResult],
    built: BuiltTrees,
    update: tuple[TreeBatch, PreparedRL, OldPass] | None,
) -> Path:
    """Write ``<out>/rollouts/step-<step:04d>.jsonl`` (see the module docstring);
    ``update``: the trainer's :attr:`~clawrl.rl_core.Trainer.last_update` of this step, or
    ``None`` when the step trained nothing. Returns the path."""
    tokens = trained_tokens(*update) if update is not None else {}
    path = Path(out) / "rollouts" / f"step-{step:04d}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        for x in results:
            row = x.model_dump(mode="json", exclude={"records", "stdout", "stderr"})
            mine = tokens.get(x.rollout_id)
            row.update(step=step, trained=x.rollout_id in built.groups)
            row["advantage"] = _rollout_advantage(mine)
            row["tokens"] = mine or {}
            f.write(json_bytes(row) + b"\n")
    return path


def write_eval_rollouts(out: str | Path, tag: str, results: Sequence[RolloutResult]) -> Path:
    """Write ``<out>/rollouts/eval-<tag>.jsonl``: one line per held-out rollout of the
    evaluation ``tag`` (``step-0``, ``step-5-greedy``, ...), as in the step files with
    ``eval`` = the tag and nothing trained. Returns the path."""
    path = Path(out) / "rollouts" / f"eval-{tag}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        for x in results:
            row = x.model_dump(mode="json", exclude={"records", "stdout", "stderr"})
            row.update(eval=tag, trained=False, advantage=None, tokens={})
            f.write(json_bytes(row) + b"\n")
    return path
