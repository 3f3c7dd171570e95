"""Multi-turn RL rollouts against a simulated user: the ``simulated-user`` harness through
the real rollout runner (podman sandbox, proxy). The model is the proxy's ScriptedBackend (a
test backend: predetermined tool calls). The reward is the task's execution checks."""

from __future__ import annotations

from pathlib import Path

import pytest
from clawrl.bench import RolloutRunner, RolloutSpec, RolloutStatus, load_task, plan_rollouts
from clawrl.bench.harness import get_harness
from clawrl.ise_synth import SimulatedUserHarness, export_bench_suite, generate_checkable_intents
from clawrl.proxy import SessionInfo, build_default_model, format_assistant_text, serve
from clawrl.proxy.testing import ScriptedBackend

pytestmark = pytest.mark.podman


@pytest.mark.slow
async def test_the_reward_comes_from_the_checks_after_the_users_follow_up(
    tmp_path: Path,
) -> None:
    """Turn 1: the agent only claims it is done (the checks fail). Turn 2, the user's request
    to check the work: the 'fixer' runs the task's oracle, the 'claimer' claims again. The
    fixer's reward is 1.0 and the claimer's 0.0 — the checks decide, after the last turn."""
    (intent,) = generate_checkable_intents(1, seed=5, split="heldout")
    (task_dir,) = export_bench_suite([intent], tmp_path / "suite")
    task = load_task(task_dir)
    assert isinstance(get_harness("simulated-user"), SimulatedUserHarness)  # the entry point
    model_dir = build_default_model("byte")
    backend = ScriptedBackend.from_model_dir(model_dir)
    fix = format_assistant_text(tool_calls=[("bash", {"command": intent.extra["solution"]})])
    done = format_assistant_text(content="All done, everything is in place.")
    scripts = {0: [done, fix, format_assistant_text(content="Fixed it.")], 1: [done, done]}

    async def script(session: SessionInfo, spec: RolloutSpec) -> None:
        backend.script(session.session_id, scripts[spec.sample_index])

    async with serve(backend, model_dir) as endpoint:
        runner = RolloutRunner(endpoint, session_hook=script, concurrency=2)
        results = await runner.run(plan_rollouts([task], [SimulatedUserHarness()], samples=2))
    by_sample = {r.sample_index: r for r in results}
    for r in results:
        assert r.status is RolloutStatus.OK, (r.reason, r.stderr)
        users = [m for m in r.records[-1]["request"]["messages"] if m["role"] == "user"]
        assert len(users) == 2 and "check your work" in users[1]["content"]
    fixer, claimer = by_sample[0], by_sample[1]
    assert fixer.n_calls == 3 and fixer.reward == 1.0
    assert claimer.n_calls == 2 and claimer.reward == 0.0  # it said "done" twice
