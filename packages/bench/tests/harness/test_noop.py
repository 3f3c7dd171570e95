"""The no-op harness through the rollout runner: an untouched built-in workspace scores 0
with status ok (no model, no proxy)."""

from __future__ import annotations

import pytest
from clawrl.bench import RolloutStatus, load_builtin_suite, run_rollouts


@pytest.mark.podman
async def test_noop_scores_an_untouched_builtin_workspace_zero() -> None:
    task = next(t for t in load_builtin_suite() if t.id == "csv_to_markdown")
    (r,) = await run_rollouts([task], ["noop"], concurrency=1)
    assert r.harness == "noop" and r.session_id == "" and r.n_calls == 0
    assert r.status is RolloutStatus.OK, (r.reason, r.stderr[-2000:])
    assert r.exit_code == 0 and r.end_reason == "exited"
    assert r.verifier is not None and r.verifier.ok
    assert r.reward == 0.0
    assert r.workspace_diff == []
