"""Rollout planning: tasks x harnesses x samples, grouped per task and harness."""

from __future__ import annotations

import pytest
from clawrl.bench import load_builtin_suite, plan_rollouts


def test_plan_groups_samples_per_task_and_harness() -> None:
    tasks = load_builtin_suite()[:2]
    specs = plan_rollouts(tasks, ["oracle", "reference"], samples=3)
    assert len(specs) == 12
    assert len({s.rollout_id for s in specs}) == 12
    groups = {s.group_id for s in specs}
    assert groups == {f"{t.id}/{h}" for t in tasks for h in ("oracle", "reference")}
    with pytest.raises(ValueError):
        plan_rollouts(tasks, ["oracle"], samples=0)
