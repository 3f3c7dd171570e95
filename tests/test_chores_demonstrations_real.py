"""The chores family's worked solutions (the mix-harness cold start's data) through every
real harness program: the proxy's ScriptedBackend (a test backend) plays each step of the
demonstration as a call of the harness's own shell tool (Claude Code ``Bash``, Codex
``exec_command``, pi ``bash``, OpenClaw ``exec``, mini-swe-agent ``bash`` then its submit
command, the reference harness ``bash``); the harness runs each one in its podman sandbox
and the task's exact verifier scores the workspace 1, with one recorded call per step."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from clawrl.bench import (
    RolloutOptions,
    RolloutRunner,
    RolloutSpec,
    RolloutStatus,
    Task,
    generate_chore_tasks,
    load_task,
    plan_rollouts,
)
from clawrl.bench.harness import demonstration_turns, get_harness
from clawrl.proxy import SessionInfo, build_default_model, serve
from clawrl.proxy.testing import ScriptedBackend

pytestmark = [
    pytest.mark.podman,
    pytest.mark.skipif(shutil.which("npm") is None, reason="needs npm to install harnesses"),
    pytest.mark.slow,
]

HARNESSES = ["reference", "mini-swe-agent", "pi", "codex", "claude-code", "openclaw"]
#: OpenClaw starts in 40-70 s on 2 idle cores, much longer under load
OPTIONS = RolloutOptions(max_turns=8, memory_mb=3072, agent_timeout_s=900)


async def test_demonstrations_solve_chores_through_every_harness(tmp_path: Path) -> None:
    # two templates: a one-line shell answer and a python heredoc that rewrites JSON
    tasks = generate_chore_tasks(
        tmp_path / "tasks", "train", 2, 0, templates=["count_matches", "config_key"]
    )
    await _demonstrations_solve(tasks, HARNESSES, OPTIONS, concurrency=4)


async def test_checkable_intents_worked_solutions_solve_through_harnesses(tmp_path: Path) -> None:
    """ISE's checkable intents, exported as a bench suite, carry the same kind of worked
    solution (look, do, per step; then check): played through the reference harness and
    mini-swe-agent they score 1, one recorded call per command (the cold start of a
    teacher on the intents' train split)."""
    from clawrl.ise_synth import export_bench_suite, generate_checkable_intents

    intents = generate_checkable_intents(3, seed=0, split="train")
    tasks = [load_task(d) for d in export_bench_suite(intents, tmp_path / "suite")]
    assert {len(i.extra["steps"]) for i in intents} != {1}  # a multi-step intent among them
    options = RolloutOptions(max_turns=10, memory_mb=3072, agent_timeout_s=600)
    await _demonstrations_solve(tasks, ["reference", "mini-swe-agent"], options, concurrency=3)


async def _demonstrations_solve(
    tasks: list[Task], names: list[str], options: RolloutOptions, concurrency: int
) -> None:
    """Play each task's demonstration through each named harness (ScriptedBackend) and
    assert every rollout scores 1 with one recorded call per command plus the finish."""
    harnesses = [get_harness(n) for n in names]
    model_dir = Path(build_default_model("qwen3"))
    backend = ScriptedBackend.from_model_dir(model_dir)
    async with serve(backend, model_dir) as endpoint:

        async def script(session: SessionInfo, spec: RolloutSpec) -> None:
            backend.script(session.session_id, demonstration_turns(spec.harness, spec.task))

        runner = RolloutRunner(endpoint, options, session_hook=script, concurrency=concurrency)
        results = await runner.run(plan_rollouts(tasks, harnesses))
    assert len(results) == len(tasks) * len(harnesses)
    steps = {t.id: len(t.metadata["demonstration"]) for t in tasks}
    for r in results:
        detail = f"{r.harness} {r.task_id}: {r.status.value} {r.reason} {r.stderr[-500:]}"
        assert r.status is RolloutStatus.OK and r.reward == 1.0, detail
        # look, solve, check, then the way to finish (a final answer, or mini's submit)
        assert r.n_calls == steps[r.task_id] + 1, detail
