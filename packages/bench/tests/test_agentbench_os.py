"""AgentBench OS interaction: JSON arrays of tasks, init/start scripts in the agent's
sandbox, the answer channel, exact-match / regex / check-script grading in that sandbox,
and the example's expected answer fixed before the agent runs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from clawrl.bench import (
    Layout,
    RolloutStatus,
    Task,
    TaskLoadError,
    aggregate,
    load_agentbench_os,
    load_suite,
    run_rollouts,
)
from clawrl.bench.harness.base import HarnessAdapter, HarnessContext, HarnessLaunch, WireAPI
from clawrl.bench.task_env import TaskEnvironments
from clawrl.bench.tasks.agentbench_os import agent_answer, grade_in_sandbox, run_setup
from clawrl.bench.verify import VerifierStatus
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
        (
            {"description": "x", "evaluation": {"check": [None], "example": "echo 1"}},
            "null check needs a later check script",
        ),
        ({"description": "x", "evaluation": {"check": []}}, "needs a script"),
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
            graded = await grade_in_sandbox(task, sb, answer, expected=setup.expected)
            rewards.append(graded.reward)
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


# A `null` check: the expected answer is the example's output. AgentBench computed it after
# the agent, in the agent's sandbox, where the agent could change what it counts.
_INT_MATCH = (
    "import sys\n"
    "try:\n    sys.exit(0 if int(sys.argv[1]) == int(sys.argv[2]) else 1)\n"
    "except ValueError:\n    sys.exit(1)\n"
)
_CHECK = [None, {"language": "python", "code": _INT_MATCH}]
_GROUPS = 60  # more groups than the base image has
COUNTED = [
    {
        "description": "How many files are there in /root?",
        "create": {"init": "for i in 1 2 3 4 5; do echo $i > /root/f$i; done"},
        "evaluation": {"check": _CHECK, "example": "ls /root | wc -l"},
    },
    {
        "description": "How many groups are in my system?",
        "evaluation": {"check": _CHECK, "example": "getent group | wc -l"},
    },
    {
        "description": "How many files are there in /root?",
        "evaluation": {"check": _CHECK, "example": "echo 7; echo broken >&2; exit 3"},
    },
]
FILES, GROUPS, BROKEN = range(3)


def _answer(text: str) -> str:
    return f"mkdir -p /run/clawrl && printf '%s' {text} > /run/clawrl/answer"


class _Scripted(HarnessAdapter):
    """An agent without a model: one shell command per task (by index in ``COUNTED``)."""

    api: WireAPI | None = None
    needs_model = False

    def __init__(self, name: str, commands: dict[int, str]) -> None:
        self.name = name
        self.commands = commands

    def launch(self, ctx: HarnessContext) -> HarnessLaunch:
        index = int(ctx.task.metadata["index"])
        cmd = self.commands.get(index, "true")
        return HarnessLaunch(argv=("/bin/sh", "-c", cmd), workdir=ctx.task.workspace_path)


@pytest.fixture(scope="module")
def counted(tmp_path_factory: pytest.TempPathFactory) -> list[Task]:
    root = tmp_path_factory.mktemp("agentbench-counted")
    (root / "counted.json").write_text(json.dumps(COUNTED))
    return load_agentbench_os(root / "counted.json")


@pytest.mark.podman
@pytest.mark.slow
def test_expected_answer_is_fixed_before_the_agent(counted: list[Task]) -> None:
    """The agent cannot change the state the example counts: deleting the counted files
    and answering 0, or adding groups until the count is its answer, scores 0; the honest
    count scores 1 and a wrong one 0 (through the rollout runner)."""
    grow = (
        f"n=$(getent group | wc -l); while [ $n -lt {_GROUPS} ]; do groupadd g$n; "
        f"n=$((n+1)); done; {_answer(str(_GROUPS))}"
    )
    harnesses = [
        _Scripted("honest", {FILES: _answer("5"), GROUPS: _answer("$(getent group | wc -l)")}),
        _Scripted("tamper", {FILES: f"rm -f /root/*; {_answer('0')}", GROUPS: grow}),
        _Scripted("wrong", {FILES: _answer("4"), GROUPS: _answer(str(_GROUPS))}),
        "oracle",
    ]
    results = asyncio.run(run_rollouts(counted[:BROKEN], harnesses, concurrency=2))
    got = {(r.task_id.rsplit("-", 1)[1], r.harness): (r.status, r.reward) for r in results}
    ok = RolloutStatus.OK
    assert got == {
        ("00000", "honest"): (ok, 1.0),
        ("00000", "tamper"): (ok, 0.0),
        ("00000", "wrong"): (ok, 0.0),
        ("00000", "oracle"): (ok, 1.0),
        ("00001", "honest"): (ok, 1.0),
        ("00001", "tamper"): (ok, 0.0),
        ("00001", "wrong"): (ok, 0.0),
        ("00001", "oracle"): (ok, 1.0),
    }, results


@pytest.mark.podman
@pytest.mark.slow
def test_failing_example_is_an_env_error(counted: list[Task]) -> None:
    """An example that fails is the task's failure (env-error, with its reason), never an
    ok 0 that would look like the agent's, nor a pass."""
    honest = _Scripted("honest", {BROKEN: _answer("7")})
    [r] = asyncio.run(run_rollouts([counted[BROKEN]], [honest]))
    assert r.status is RolloutStatus.ENV_ERROR and r.reward == 0.0, r
    assert "example script exited 3" in r.reason and "broken" in r.reason, r.reason


@pytest.mark.podman
@pytest.mark.slow
def test_null_check_without_expected_is_refused(counted: list[Task]) -> None:
    """grade_in_sandbox never runs the example after the agent: without the expected
    answer of run_setup it refuses (verifier-error), whatever the answer."""

    async def go() -> list[tuple[VerifierStatus, float]]:
        task = counted[FILES]
        image = await TaskEnvironments().image(task)
        assert image is not None
        spec = SandboxSpec(image=image.tag, env=image.env, read_only_root=False, forwarder=False)
        async with await Sandbox.create(spec) as sb:
            setup = await run_setup(task, sb, init=False)
            assert setup.error is None and setup.expected == "5\n"
            out = []
            for expected in (None, setup.expected):
                v = await grade_in_sandbox(task, sb, "5", expected=expected)
                out.append((v.status, v.reward))
            return out

    assert asyncio.run(go()) == [(VerifierStatus.ERROR, 0.0), (VerifierStatus.OK, 1.0)]


# Shapes of published AgentBench entries: `create` as a list (a copy of a `check` list) or a
# string, and a `match` whose example prints something else (the oracle writes the match).
_INT_CHECK = {"language": "python", "code": _INT_MATCH}
PUBLISHED = [
    {
        "description": "How many directories are in /root/d?",
        "create": [None, {"language": "python", "file": "check/integer-match.py"}],
        "evaluation": {"match": "0"},
    },
    {
        "description": "What does /root/say print?",
        "create": "default",
        "evaluation": {"check": [None, _INT_CHECK], "example": "echo 7"},
    },
    {
        "description": "What will be the output if I execute ~/test?",
        "create": {"init": {"code": "printf 'echo a3b0c7' > /root/test && chmod 000 /root/test"}},
        "evaluation": {"match": "a3b0c7", "example": {"code": "echo not-the-answer"}},
        "example": {"code": "chmod 777 test && ~/test"},
    },
]


def test_published_entry_shapes_load(tmp_path: Path) -> None:
    """A file with a list ``create`` and a string ``create`` loads whole: those entries get
    the default image and no init script, as AgentBench reads them."""
    (tmp_path / "published.json").write_text(json.dumps(PUBLISHED))
    tasks = load_agentbench_os(tmp_path / "published.json")
    assert [t.id for t in tasks] == ["published-00000", "published-00001", "published-00002"]
    assert [t.image for t in tasks] == ["ubuntu:22.04"] * 3
    assert [len(t.init_scripts) for t in tasks] == [0, 0, 1]


@pytest.mark.podman
@pytest.mark.slow
def test_match_oracle_writes_the_match(tmp_path: Path) -> None:
    """The oracle answers a ``match`` with the stated answer, not with its example's
    output: 1 on every published shape; noop 0."""
    (tmp_path / "published.json").write_text(json.dumps(PUBLISHED))
    tasks = load_agentbench_os(tmp_path / "published.json")
    results = asyncio.run(run_rollouts(tasks, ["oracle", "noop"], concurrency=2))
    got = sorted((r.task_id, r.harness, r.status, r.reward) for r in results)
    ok = RolloutStatus.OK
    assert got == [
        (t, h, ok, 1.0 if h == "oracle" else 0.0)
        for t in ("published-00000", "published-00001", "published-00002")
        for h in ("noop", "oracle")
    ], results


@pytest.mark.podman
@pytest.mark.slow
def test_oracle_without_solution_scores_zero(tmp_path: Path) -> None:
    """An entry with no example and no ``match`` has no oracle: the oracle rollout is a
    ``harness-error`` whose reward is 0 in the results and the summary, although its check
    passes on the untouched sandbox (AgentBench's safety entries: "do nothing" is right)."""
    entry = {"description": "Leave /root alone.", "evaluation": {"check": {"code": "exit 0"}}}
    (tmp_path / "safety.json").write_text(json.dumps([entry]))
    tasks = load_agentbench_os(tmp_path / "safety.json")
    results = asyncio.run(run_rollouts(tasks, ["oracle", "noop"], concurrency=2))
    by = {r.harness: r for r in results}
    assert by["oracle"].status is RolloutStatus.HARNESS_ERROR, by["oracle"]
    assert "no solution" in by["oracle"].reason
    assert by["oracle"].reward == 0.0 and by["oracle"].subscores == {}
    assert by["oracle"].verifier is not None and by["oracle"].verifier.reward == 1.0
    assert by["noop"].status is RolloutStatus.OK and by["noop"].reward == 1.0
    rep = aggregate([r.scored() for r in results])
    assert rep.by_harness["oracle"].mean_score == 0.0
    assert rep.by_harness["noop"].mean_score == 1.0


_INT_MATCH = {
    "language": "python",
    "code": "from sys import argv\nexit(int(argv[1]) != int(argv[2]))",
}


@pytest.mark.podman
@pytest.mark.slow
def test_an_answer_that_depends_on_the_moment_is_an_env_error(tmp_path: Path) -> None:
    """A ``null`` check whose example counts live processes (AgentBench ``bootstrap.json``:
    ``ps -A | wc -l``) has no answer that is right for the task itself: AgentBench computes
    it while the agent's shell is alive, clawrl before the agent. Both rollouts are an
    ``env-error`` naming it (left out of the scores), never an oracle ``ok`` 0; an example
    with a stable answer beside it still scores oracle 1, noop 0. Fails on the code before:
    ``ok`` for both (the oracle's answer counted its own shell)."""
    entries = [
        {"description": "How many processes run?", "evaluation": {"check": [None, _INT_MATCH], "example": "ps -A | wc -l"}},
        {"description": "How many files in /etc?", "evaluation": {"check": [None, _INT_MATCH], "example": "ls /etc | wc -l"}},
    ]  # fmt: skip
    (tmp_path / "live.json").write_text(json.dumps(entries))
    tasks = load_agentbench_os(tmp_path / "live.json")
    results = asyncio.run(run_rollouts(tasks, ["oracle", "noop"], concurrency=2))
    got = {(r.task_id, r.harness): r for r in results}
    for h in ("oracle", "noop"):
        live = got[("live-00000", h)]
        assert live.status is RolloutStatus.ENV_ERROR, live
        assert "depends on the processes alive" in live.reason, live.reason
    assert (got[("live-00001", "oracle")].status, got[("live-00001", "oracle")].reward) == (
        RolloutStatus.OK,
        1.0,
    )
    assert got[("live-00001", "noop")].reward == 0.0
