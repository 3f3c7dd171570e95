"""The Harbor and ClawGym layouts load, and their fixtures run through the oracle."""

from __future__ import annotations

from pathlib import Path

import pytest
from clawrl.bench import (
    Executor,
    Layout,
    LocalExecutor,
    SandboxExecutor,
    detect_layout,
    load_suite,
    load_task,
    prepare_workspace,
    run_solution,
    verify,
)

FIXTURES = Path(__file__).parent / "fixtures"
HARBOR = FIXTURES / "harbor_greeting"
CLAWGYM = FIXTURES / "clawgym_word_stats"


def test_detect_layouts() -> None:
    assert detect_layout(HARBOR) is Layout.HARBOR
    assert detect_layout(CLAWGYM) is Layout.CLAWGYM


def test_harbor_fields() -> None:
    task = load_task(HARBOR)
    assert task.id == "harbor_greeting"
    assert task.layout is Layout.HARBOR
    assert task.instruction.startswith("Read the names")
    assert task.workspace_path == "/app"
    assert task.timeouts.agent_s == 300 and task.timeouts.verifier_s == 120
    assert (
        task.limits.cpus == 1 and task.limits.memory_mb == 1024 and task.limits.storage_mb == 2048
    )
    assert task.network is False
    assert task.image == "debian:bookworm-slim"
    assert task.env == {"GREETING": "Hello"}
    assert len(task.setup_commands) == 1 and "apt-get" in task.setup_commands[0]
    assert task.dockerfile == HARBOR.resolve() / "environment" / "Dockerfile"  # built per run
    assert [(s.src.name, s.dest) for s in task.workspace_sources] == [("data", "data")]
    assert task.category == "file-operations" and task.difficulty == "easy"
    assert task.verifier.command == ("bash", "/tests/test.sh")
    assert task.solution is not None


def test_harbor_defaults(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    (tmp_path / "instruction.md").write_text("do it\n")
    (tmp_path / "task.toml").write_text('version = "1.0"\n')
    task = load_task(tmp_path)
    assert task.timeouts.agent_s == 600 and task.timeouts.verifier_s == 600
    assert task.limits.cpus == 1 and task.limits.memory_mb == 2048
    assert task.workspace_path == "/app" and task.solution is None


def test_clawgym_fields() -> None:
    task = load_task(CLAWGYM)
    assert task.id == "clawgym_word_stats"
    assert task.layout is Layout.CLAWGYM
    assert task.workspace_path == "/root/.openclaw/workspace"
    assert task.verifier.mount_path == "/root/.openclaw/workspace/reward"
    assert task.verifier.reward_channel == "stdout"
    assert task.category == "analysis & reasoning"
    assert task.metadata["input_mount_dir"] == "/root/.openclaw/workspace"


def test_load_suite_of_fixtures() -> None:
    assert [t.id for t in load_suite(FIXTURES)] == [
        "clawgym_tabulate",
        "clawgym_word_stats",
        "harbor_greeting",
        "harbor_slugify",
        "tb1_solution_yaml",
        "tb1_word_count",
    ]


def _oracle_roundtrip(task_dir: Path, tmp_path: Path, executor: Executor) -> None:
    task = load_task(task_dir)
    ws = prepare_workspace(task, tmp_path / "ws")
    untouched = verify(task, ws, executor)
    assert untouched.ok, untouched.reason
    assert untouched.reward == 0.0
    solved = run_solution(task, ws, executor)
    assert solved.exit_code == 0, solved.stderr
    result = verify(task, ws, executor)
    assert result.ok, (result.reason, result.stderr)
    assert result.reward == 1.0
    if task.layout is Layout.CLAWGYM:
        assert result.subscores == {"stats_lines": 1.0, "stats_words": 1.0, "longest": 1.0}
        assert not (ws / "reward").exists()  # verifier files never reach the agent's workspace


@pytest.mark.parametrize("task_dir", [HARBOR, CLAWGYM], ids=["harbor", "clawgym"])
def test_fixture_oracle_local(task_dir: Path, tmp_path: Path) -> None:
    # oracle output only: trusted on the host (external layouts count as running workspace code)
    _oracle_roundtrip(task_dir, tmp_path, LocalExecutor(trust_workspace_code=True))


@pytest.mark.podman
@pytest.mark.parametrize("task_dir", [HARBOR, CLAWGYM], ids=["harbor", "clawgym"])
def test_fixture_oracle_sandbox(task_dir: Path, tmp_path: Path) -> None:
    _oracle_roundtrip(task_dir, tmp_path, SandboxExecutor())


def test_clawgym_partial_credit(tmp_path: Path) -> None:
    task = load_task(CLAWGYM)
    ws = prepare_workspace(task, tmp_path / "ws")
    (ws / "output").mkdir()
    (ws / "output" / "longest.txt").write_text("looking\n")
    result = verify(task, ws, LocalExecutor(trust_workspace_code=True))
    assert result.ok
    assert result.reward == pytest.approx(1 / 3)
    assert result.subscores == {"stats_lines": 0.0, "stats_words": 0.0, "longest": 1.0}


@pytest.mark.podman
@pytest.mark.parametrize("task_dir", [HARBOR, CLAWGYM], ids=["harbor", "clawgym"])
async def test_rollout_path_in_live_sandbox(task_dir: Path, tmp_path: Path) -> None:
    """The runner's path: workspace placed in an agent sandbox, the oracle acts there as the
    agent would, then the workspace is verified from outside, in a fresh sandbox."""
    from clawrl.bench import verify_sandbox
    from clawrl.sandbox import Sandbox, SandboxSpec

    task = load_task(task_dir)
    assert task.solution is not None
    ws = prepare_workspace(task, tmp_path / "ws")
    spec = SandboxSpec(
        files={task.workspace_path: ws, "/solution": task.solution.files_dir}, read_only_root=False
    )
    async with await Sandbox.create(spec) as sb:
        # a cheating agent plants full-marks rewards where verifiers write theirs
        plant = (
            "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt && echo 1 > reward.txt"
        )
        await sb.exec(["bash", "-c", plant], workdir=task.workspace_path)
        before = await verify_sandbox(task, sb)
        assert before.ok and before.reward == 0.0
        res = await sb.exec(list(task.solution.command), workdir=task.workspace_path, timeout=60)
        assert res.exit_code == 0, res.stderr
        after = await verify_sandbox(task, sb)
        assert after.ok and after.reward == 1.0, after.reason
