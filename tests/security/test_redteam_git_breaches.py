"""Red-team findings against AgentBench OS git checks: repository settings that
``GIT_OVERRIDES`` does not pin, and that ``GIT_PROGRAM_KEYS`` does not refuse, make a check's
``git log`` / ``git status`` report a state the agent did not reach. Same pattern as
``test_agentbench_attacks.py``: the agent's commands run as root in the runner's own sandbox,
then the runner's end of the agent phase and the grading. Each attack asserts the secure
outcome (reward 0); the honest and the idle agent pin the tasks (1 and 0). Revert tried:
without the mailmap, stat and fileMode entries of ``GIT_OVERRIDES`` each attack scores 1.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import tempfile
from pathlib import Path

import pytest
from clawrl.bench import RolloutRunner, RolloutSpec, Task, load_agentbench_os
from clawrl.bench.harness import get_harness
from clawrl.bench.task_env import TaskEnvironments
from clawrl.bench.tasks.agentbench_os import grade_in_sandbox, run_setup
from clawrl.sandbox import Sandbox, kill_all_but

pytestmark = [pytest.mark.podman, pytest.mark.slow]

_ID = "-c user.name=a -c user.email=a@b"
_REPO = f"git init -q /root/repo && cd /root/repo && echo a > f && git add f && git {_ID} commit -q -m init"
ENTRIES = [
    {
        "description": "Amend the last commit of /root/repo so that its author is Alice <alice@x>.",
        "create": {"init": {"code": _REPO}},
        "evaluation": {"check": {"code": "git -C /root/repo log -1 | grep -q 'Author: Alice <alice@x>'"}},
    },
    {
        "description": "Commit every change in /root/repo.",
        "create": {"init": {"code": _REPO + " && sleep 1.1 && echo b > f"}},
        "evaluation": {"check": {"code": '[ -z "$(git -C /root/repo status --porcelain)" ]'}},
    },
    {
        "description": "Commit every change in /root/repo.",
        "create": {"init": {"code": _REPO + " && chmod +x f"}},
        "evaluation": {"check": {"code": '[ -z "$(git -C /root/repo status --porcelain)" ]'}},
    },
]  # fmt: skip
AUTHOR, CONTENT, MODE = range(3)
_COMMIT = f"cd /root/repo && git add -A && git {_ID} commit -q -m c"
_AMEND = f"cd /root/repo && git {_ID} commit -q --amend --no-edit --author='Alice <alice@x>'"
# f keeps its wrong content; its mtime is set back to the index's, ctime and inode ignored
_STAT = (
    "cd /root/repo && m=$(git ls-files --debug f | sed -n 's/^ *mtime: *\\([0-9]*\\):.*/\\1/p')"
    " && touch -d @$m f && git config core.trustctime false && git config core.checkStat minimal"
    " && sleep 1.1 && touch .git/index"
)


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> list[Task]:
    root = tmp_path_factory.mktemp("agentbench-git-breaches")
    (root / "tasks.json").write_text(json.dumps(ENTRIES))
    return load_agentbench_os(root / "tasks.json")


async def _grade(task: Task, agent: list[str]) -> float:
    image = await TaskEnvironments().image(task)
    runner = RolloutRunner()
    spec = RolloutSpec(task=task, harness=get_harness("noop"), sample_index=0, group_id="g")
    with tempfile.TemporaryDirectory() as ws:
        sb_spec = runner.sandbox_spec(spec, Path(ws), image)
    async with await Sandbox.create(dataclasses.replace(sb_spec, files={})) as sb:
        setup = await run_setup(task, sb, init=False)
        assert setup.error is None
        for cmd in agent:
            res = await sb.exec(["/bin/sh", "-c", cmd], timeout=30, workdir="/root")
            assert res.ok, res.stderr
        await kill_all_but(sb, setup.sessions)
        return (await grade_in_sandbox(task, sb, "0", expected=setup.expected)).reward


def test_the_tasks_tell_honest_from_idle(tasks: list[Task]) -> None:
    async def go() -> list[float]:
        return [
            await _grade(tasks[AUTHOR], [_AMEND]),
            await _grade(tasks[AUTHOR], []),
            await _grade(tasks[CONTENT], [_COMMIT]),
            await _grade(tasks[CONTENT], []),
            await _grade(tasks[MODE], [_COMMIT]),
            await _grade(tasks[MODE], []),
        ]

    assert asyncio.run(go()) == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]


@pytest.mark.parametrize(
    "cmd",
    [
        "printf 'Alice <alice@x> a <a@b>\\n' > /root/.mm && git -C /root/repo config mailmap.file /root/.mm",
        "printf 'Alice <alice@x> a <a@b>\\n' > /root/repo/.mailmap",
    ],
    ids=["mailmap.file", "worktree-mailmap"],
)  # fmt: skip
def test_mailmap_cannot_fake_the_author(tasks: list[Task], cmd: str) -> None:
    assert asyncio.run(_grade(tasks[AUTHOR], [cmd])) == 0.0


def test_stat_settings_cannot_hide_a_change(tasks: list[Task]) -> None:
    assert asyncio.run(_grade(tasks[CONTENT], [_STAT])) == 0.0


def test_filemode_cannot_hide_a_mode_change(tasks: list[Task]) -> None:
    assert asyncio.run(_grade(tasks[MODE], ["git -C /root/repo config core.fileMode false"])) == 0.0
