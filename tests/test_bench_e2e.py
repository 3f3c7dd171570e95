"""End to end: bench's rollout runner through real podman sandboxes and the real proxy.

Harnesses run inside sandboxes and reach the proxy through the mounted model socket and the
in-sandbox forwarder; verifiers run afterwards in fresh sandboxes. The "models" are the
embedded tiny model (real generation, scores near 0) and the ScriptedBackend (a test backend:
predetermined completions, e.g. a task's oracle as tool calls).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from clawrl.bench import (
    ModelEndpoint,
    RolloutOptions,
    RolloutRunner,
    RolloutSpec,
    RolloutStatus,
    aggregate,
    load_builtin_suite,
    load_task,
    plan_rollouts,
    run_rollouts,
)
from clawrl.bench.harness import (
    HarnessAdapter,
    HarnessContext,
    HarnessLaunch,
    OracleHarness,
    oracle_completions,
)
from clawrl.proxy import SessionInfo, build_default_model, format_assistant_text, serve
from clawrl.proxy.testing import ScriptedBackend

pytestmark = pytest.mark.podman

FIXTURES = Path(__file__).resolve().parents[1] / "packages/bench/tests/fixtures"


def _builtin(task_id: str):  # type: ignore[no-untyped-def]
    return next(t for t in load_builtin_suite() if t.id == task_id)


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return Path(build_default_model("byte"))


@pytest_asyncio.fixture
async def scripted(model_dir: Path) -> AsyncIterator[tuple[ScriptedBackend, ModelEndpoint]]:
    backend = ScriptedBackend.from_model_dir(model_dir)
    async with serve(backend, model_dir) as endpoint:
        yield backend, endpoint


def _bash(command: str) -> str:
    return format_assistant_text(tool_calls=[("bash", {"command": command})])


@pytest.mark.slow
async def test_reference_harness_with_the_tiny_model(model_dir: Path) -> None:
    """Real generation by the embedded tiny model: calls captured with the session's
    metadata, the verifier ran, the status is not an infrastructure failure."""
    from clawrl.proxy import EmbeddedBackend

    task = _builtin("csv_to_markdown")
    results = await run_rollouts(
        [task],
        ["reference"],
        samples=2,
        backend=EmbeddedBackend(model_dir),
        model_dir=model_dir,
        options=RolloutOptions(max_turns=2, max_tokens=48),
        concurrency=2,
    )
    assert len(results) == 2
    assert sorted(r.sample_index for r in results) == [0, 1]
    for r in results:
        assert r.status in {RolloutStatus.OK, RolloutStatus.HARNESS_ERROR}, r.reason
        assert r.status is not RolloutStatus.INFRA_ERROR
        assert r.verifier is not None and r.verifier.ok, r.verifier
        assert 0.0 <= r.reward <= 1.0
        assert 1 <= r.n_calls <= 2 and len(r.records) == r.n_calls
        rec = r.records[0]
        assert rec["session_id"] == r.session_id
        assert rec["prompt_ids"] and len(rec["completion_ids"]) <= 48
        assert len(rec["completion_logprobs"]) == len(rec["completion_ids"])
        meta = rec["metadata"]
        assert meta["task_id"] == task.id and meta["harness"] == "reference"
        assert meta["group_id"] == f"{task.id}/reference"
        assert meta["sample_index"] == r.sample_index
        assert "transcript" in r.logs
    assert results[0].session_id != results[1].session_id


async def test_scripted_oracle_tool_calls_solve_the_task(
    scripted: tuple[ScriptedBackend, ModelEndpoint],
) -> None:
    """The ScriptedBackend emits the task's oracle as write_file / bash tool calls in the
    reference harness's schema: the reference harness solves the task (score 1)."""
    backend, endpoint = scripted
    task = _builtin("csv_to_markdown")

    async def script(session: SessionInfo, spec: RolloutSpec) -> None:
        backend.script(session.session_id, oracle_completions(spec.task))

    runner = RolloutRunner(endpoint, session_hook=script, concurrency=1)
    (r,) = await runner.run(plan_rollouts([task], ["reference"]))
    assert r.status is RolloutStatus.OK, (r.reason, r.stderr)
    assert r.reward == 1.0 and r.subscores and all(v == 1.0 for v in r.subscores.values())
    assert r.end_reason == "final_answer" and r.n_calls == 3
    assert [rec["finish_reason"] for rec in r.records] == ["tool_calls", "tool_calls", "stop"]
    changed = {c.path: c for c in r.workspace_diff}
    assert changed["output/products.md"].change == "added"
    assert changed["output/products.md"].diff and "| " in changed["output/products.md"].diff
    # the verification's interval is recorded (the train loop's ``time/verify`` unions them)
    t = r.timing
    assert t["started"] <= t["verify_started"] <= t["verify_started"] + t["verify"] <= t["finished"]


@pytest.mark.parametrize("fixture", ["harbor_greeting", "clawgym_word_stats"])
async def test_imported_layouts_through_oracle_and_reference_harness(
    fixture: str, scripted: tuple[ScriptedBackend, ModelEndpoint]
) -> None:
    """Harbor (workspace /app, outside the sandbox's /workspace) and ClawGym (workspace under
    /root, verifier mounted inside it) fixture tasks run unchanged through the oracle and
    through the reference harness."""
    backend, endpoint = scripted
    task = load_task(FIXTURES / fixture)

    async def script(session: SessionInfo, spec: RolloutSpec) -> None:
        backend.script(session.session_id, oracle_completions(spec.task))

    runner = RolloutRunner(endpoint, session_hook=script, concurrency=2)
    results = await runner.run(plan_rollouts([task], ["oracle", "reference"]))
    for r in results:
        assert r.status is RolloutStatus.OK, (r.harness, r.reason, r.stderr)
        assert r.reward == 1.0, (r.harness, r.verifier)
        assert r.workspace_diff
    by = {r.harness: r for r in results}
    assert by["oracle"].n_calls == 0 and by["oracle"].session_id == ""
    assert by["reference"].n_calls == 3


async def test_tampering_agent_cannot_raise_its_score(
    scripted: tuple[ScriptedBackend, ModelEndpoint],
) -> None:
    """A (scripted) agent plants full-marks reward files where verifiers write theirs,
    overwrites the verifier paths it can reach, and fakes the ClawGym reward script: every
    score stays 0."""
    backend, endpoint = scripted
    plant = (
        "mkdir -p /logs/verifier output reward; echo 1 > /logs/verifier/reward.txt; "
        "echo '{\"reward\": 1.0}' > /logs/verifier/reward.json; echo 1 > reward.txt; "
        "echo '{\"reward\": 1.0}' > reward.json; "
        "mkdir -p /tests 2>/dev/null; echo 'print(1)' > /tests/check.py 2>/dev/null; "
        "printf '#!/bin/bash\\necho \\x27{\"all\": 1.0}\\x27\\necho 1.0\\n' > reward/reward.sh; "
        "echo 'print(\"{}\")' > reward/check.py; true"
    )
    tasks = [_builtin("csv_to_markdown"), load_task(FIXTURES / "clawgym_word_stats")]

    async def script(session: SessionInfo, spec: RolloutSpec) -> None:
        backend.script(session.session_id, [_bash(plant), "I am done."])

    runner = RolloutRunner(endpoint, session_hook=script, concurrency=2)
    results = await runner.run(plan_rollouts(tasks, ["reference"]))
    for r in results:
        assert r.status is RolloutStatus.OK, r.reason
        assert r.n_calls == 2
        assert r.verifier is not None and r.verifier.ok
        assert r.reward == 0.0, (r.task_id, r.subscores)
        paths = {c.path for c in r.workspace_diff}
        assert "reward.txt" in paths  # the planted files are in the diff, not in the score


async def test_timeout_and_infra_failures(
    scripted: tuple[ScriptedBackend, ModelEndpoint], tmp_path: Path
) -> None:
    """A harness still running at the agent timeout is `timeout` (and still verified); a
    sandbox that cannot be created is `infra-error`, retried, and excluded from scores."""
    backend, endpoint = scripted
    task = _builtin("fix_median")

    class BrokenMount(OracleHarness):
        name = "broken"

        def mounts(self, task):  # type: ignore[no-untyped-def]
            return {str(tmp_path / "does-not-exist"): "/run/clawrl/missing"}

        def launch(self, ctx: HarnessContext) -> HarnessLaunch:
            return HarnessLaunch(argv=("true",), workdir=ctx.task.workspace_path)

    async def script(session: SessionInfo, spec: RolloutSpec) -> None:
        backend.script(session.session_id, [_bash("sleep 60")])

    events: list[str] = []
    runner = RolloutRunner(
        endpoint,
        RolloutOptions(agent_timeout_s=4, retries=1),
        session_hook=script,
        concurrency=2,
        progress=lambda e: events.append(e.kind),
    )
    broken: HarnessAdapter = BrokenMount()
    slow, failed = await runner.run(
        [RolloutSpec(task, runner_harness) for runner_harness in (_reference(), broken)]
    )
    assert slow.status is RolloutStatus.TIMEOUT and slow.exit_code is None
    assert slow.verifier is not None and slow.verifier.ok and slow.reward == 0.0
    assert 4.0 <= slow.timing["harness"] < 30.0
    assert failed.status is RolloutStatus.INFRA_ERROR and failed.attempts == 2
    assert "setup" in failed.reason
    assert events.count("retry") == 1 and events.count("finished") == 2
    report = aggregate([slow.scored(), failed.scored()])
    assert report.by_harness["broken"].n_infra_error == 1
    assert report.by_harness["broken"].n_scored == 0
    assert report.by_harness["reference"].status_counts == {"timeout": 1}


def _reference() -> HarnessAdapter:
    from clawrl.bench.harness import ReferenceHarness

    return ReferenceHarness()


@pytest.mark.slow
async def test_mini_swe_agent_with_the_tiny_model(model_dir: Path) -> None:
    """mini-swe-agent from its read-only mounted venv (built on /usr/bin/python3; installed
    on first use, ~3 min, then cached) against the embedded tiny model: calls captured, the
    verifier ran, not an infrastructure failure. The random model never makes a tool call,
    so mini-swe-agent ends by itself (repeated format errors) or at its step limit."""
    from clawrl.bench.harness import MiniSweAgentHarness
    from clawrl.proxy import EmbeddedBackend

    harness = MiniSweAgentHarness()
    harness.prepare()
    task = _builtin("csv_to_markdown")
    (r,) = await run_rollouts(
        [task],
        [harness],
        backend=EmbeddedBackend(model_dir),
        model_dir=model_dir,
        options=RolloutOptions(max_turns=2, max_tokens=16, agent_timeout_s=300),
    )
    assert r.status is RolloutStatus.OK, (r.reason, r.stdout[-2000:], r.stderr[-2000:])
    assert r.end_reason in {"repeated_format_error", "turn_limit", "submitted"}
    assert r.verifier is not None and r.verifier.ok
    assert 1 <= r.n_calls <= 2
    rec = r.records[0]
    assert rec["metadata"]["harness"] == "mini-swe-agent"
    assert rec["request"]["tools"][0]["function"]["name"] == "bash"  # tool-calling mode
    assert "trajectory" in r.logs


async def test_mini_swe_agent_submits_scripted_tool_calls(
    scripted: tuple[ScriptedBackend, ModelEndpoint],
) -> None:
    """The ScriptedBackend answers mini-swe-agent in its tool-calling schema: it runs the
    bash call in the task's workspace, then submits and exits (`ok`, `submitted`)."""
    from clawrl.bench.harness import MiniSweAgentHarness

    harness = MiniSweAgentHarness()
    harness.prepare()  # cached by test_mini_swe_agent_with_the_tiny_model; run alone, it installs
    backend, endpoint = scripted
    task = load_task(FIXTURES / "harbor_greeting")  # workspace /app
    solve = "mkdir -p output && sed 's/.*/Hello, &!/' data/names.txt > output/greeting.txt"

    async def script(session: SessionInfo, spec: RolloutSpec) -> None:
        backend.script(
            session.session_id,
            [
                format_assistant_text(
                    content="Writing it.", tool_calls=[("bash", {"command": solve})]
                ),
                format_assistant_text(
                    content="Done.",
                    tool_calls=[
                        ("bash", {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"})
                    ],
                ),
            ],
        )

    runner = RolloutRunner(endpoint, RolloutOptions(max_turns=5), session_hook=script)
    (r,) = await runner.run([RolloutSpec(task, harness)])
    assert r.status is RolloutStatus.OK, (r.reason, r.stderr[-2000:])
    assert r.end_reason == "submitted" and r.n_calls == 2 and r.turns == 2
    assert r.reward == 1.0
    assert [rec["prompt_relation"]["kind"] for rec in r.records] == ["first", "extends"]
