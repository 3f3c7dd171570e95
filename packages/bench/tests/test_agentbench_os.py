"""AgentBench OS interaction: JSON arrays of tasks, init/start scripts in the agent's
sandbox, the answer channel, exact-match / regex / check-script grading in that sandbox."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from clawrl.bench import Layout, RolloutStatus, TaskLoadError, load_suite, run_rollouts
from clawrl.bench.agentbench_os import agent_answer, grade_in_sandbox, run_setup
from clawrl.bench.task_env import TaskEnvironments
from clawrl.sandbox import Sandbox, SandboxSpec, kill_all_but

SUITE = Path(__file__).parent / "fixtures" / "agentbench_os"


def test_entries_are_tasks() -> None:
    tasks = load_suite(SUITE)
    assert [t.id for t in tasks] == ["dev-00000", "dev-00001", "dev-00002", "dev-00003"]
    assert all(t.layout is Layout.AGENTBENCH_OS and t.solution is not None for t in tasks)
    match, check, state, regex = (t.grader for t in tasks)
    assert match is not None and match.match_answer == "3"
    assert check is not None and check.check[0] is None and check.example is not None
    assert check.check[1] is not None and "integer" in check.check[1].code  # read from file
    assert state is not None and len(state.check) == 1
    assert regex is not None and regex.match_regex == r"^big\.bin$"
    assert [s.language for s in tasks[1].init_scripts] == ["bash", "python"]
    assert tasks[1].start_script is not None and tasks[1].image == "ubuntu:22.04"
    assert "answer(" in tasks[0].instruction and "/run/clawrl/answer" in tasks[0].instruction


@pytest.mark.parametrize(
    ("entry", "needle"),
    [
        ({"description": "x"}, r"bad\.json\[0\].*evaluation"),
        ({"description": "x", "evaluation": {"check": [None]}}, "null check needs"),
        ({"description": "x", "evaluation": {"check": {"file": "nope.sh"}}}, "cannot read"),
        ({"evaluation": {"match": "1"}}, "description"),
    ],
)
def test_bad_entries_are_load_errors(tmp_path: Path, entry: dict[str, object], needle: str) -> None:
    (tmp_path / "bad.json").write_text(json.dumps([entry]))
    from clawrl.bench import load_agentbench_os

    with pytest.raises(TaskLoadError, match=needle):
        load_agentbench_os(tmp_path / "bad.json")


@pytest.mark.podman
@pytest.mark.slow
def test_example_answers_pass_and_untouched_scores_zero() -> None:
    """The oracle (the example's output into the answer file) passes every task; the noop
    harness (no answer, no change) gets 0 on each."""
    tasks = load_suite(SUITE)
    results = asyncio.run(run_rollouts(tasks, ["oracle", "noop"], concurrency=2))
    for r in results:
        want = 1.0 if r.harness == "oracle" else 0.0
        assert r.status is RolloutStatus.OK and r.reward == want, (r.task_id, r.harness, r)


async def _grades(answers: list[str | None], index: int) -> list[float]:
    """Rewards of ``answers`` for task ``index``, each in a fresh sandbox of its image with
    the task's init and start scripts run."""
    task = load_suite(SUITE)[index]
    image = await TaskEnvironments().image(task)
    assert image is not None
    rewards = []
    for answer in answers:
        spec = SandboxSpec(image=image.tag, env=image.env, read_only_root=False, forwarder=False)
        async with await Sandbox.create(spec) as sb:
            setup = await run_setup(task, sb, init=False)  # the image ran the init scripts
            assert setup.error is None
            await kill_all_but(sb, setup.sessions)
            rewards.append((await grade_in_sandbox(task, sb, answer)).reward)
    return rewards


@pytest.mark.podman
@pytest.mark.slow
def test_wrong_answers_score_zero() -> None:
    assert asyncio.run(_grades(["3", " 3\n", "4", "three", None], 0)) == [1, 1, 0, 0, 0]
    assert asyncio.run(_grades(["3210", "3210\n", "3209", "", "x"], 1)) == [1, 1, 0, 0, 0]
    assert asyncio.run(_grades(["big.bin", "a.txt", "big.bin.bak"], 3)) == [1, 0, 0]


@pytest.mark.podman
def test_answer_channel() -> None:
    """The answer file wins; else the last assistant message's last answer(...), else its
    whole text."""

    async def go() -> list[str | None]:
        spec = SandboxSpec(forwarder=False)
        transcript = {
            "messages": [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": "Think: ls.\nAct: answer(2)"},
                {"role": "assistant", "content": "Think: recount.\nAct: answer(3)"},
            ]
        }
        logs = {"transcript": json.dumps(transcript)}
        plain = {"transcript": json.dumps({"messages": [{"role": "assistant", "content": "7"}]})}
        async with await Sandbox.create(spec) as sb:
            out = [await agent_answer(sb, logs), await agent_answer(sb, plain)]
            await sb.exec(["sh", "-c", "mkdir -p /run/clawrl && printf 42 > /run/clawrl/answer"])
            out.append(await agent_answer(sb, logs))
            out.append(await agent_answer(sb, {}))
        return out

    assert asyncio.run(go()) == ["3", "7", "42", "42"]
