"""Reward parsing (every garbled reward is a failure with a reason) and tamper-proofing."""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from clawrl.bench import (
    ExecResult,
    ExecSpec,
    Executor,
    ExecutorError,
    HostVerificationError,
    LocalExecutor,
    SandboxExecutor,
    Task,
    VerifierStatus,
    builtin_suite_dir,
    load_task,
    prepare_workspace,
    verify,
)
from hypothesis import given, settings
from hypothesis import strategies as st

FIXTURES = Path(__file__).parent / "fixtures"


def make_task(
    root: Path,
    check_py: str,
    *,
    verifier_s: int = 30,
    files: dict[str, str] | None = None,
    executes: bool = False,
) -> Task:
    """A minimal built-in task whose verifier is ``check_py`` (which executes workspace code
    iff ``executes``)."""
    (root / "tests").mkdir(parents=True)
    (root / "tests" / "check.py").write_text(textwrap.dedent(check_py))
    for rel, content in (files or {}).items():
        (root / "tests" / rel).write_text(content)
    (root / "task.toml").write_text(
        'id = "t"\ninstruction = "x"\ncategory = "systems"\ndifficulty = "easy"\n'
        f"verifier_executes_workspace_code = {str(executes).lower()}\n"
        f"[timeouts]\nverifier_s = {verifier_s}\n"
    )
    return load_task(root)


# ------------------------------------------------------------- parsing (fake executor)


class FakeRewardExecutor:
    """Test double: instead of running the verifier, writes given files into the reward dir."""

    def __init__(self, files: dict[str, str], stdout: str = "") -> None:
        self.files = files
        self.stdout = stdout

    def run(self, spec: ExecSpec) -> ExecResult:
        reward_dir = next(m.source for m in spec.mounts if m.target == "/logs/verifier")
        for name, content in self.files.items():
            (reward_dir / name).write_text(content)
        return ExecResult(exit_code=0, stdout=self.stdout, stderr="", duration_s=0.0)


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    return make_task(tmp_path_factory.mktemp("task"), "pass\n")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


def run_fake(task: Task, ws: Path, files: dict[str, str]) -> tuple[VerifierStatus, float, str]:
    r = verify(task, ws, FakeRewardExecutor(files))
    return r.status, r.reward, r.reason


def test_fake_executor_is_an_executor() -> None:
    assert isinstance(FakeRewardExecutor({}), Executor)
    assert isinstance(LocalExecutor(), Executor)


def test_subscores_mean(task: Task, workspace: Path) -> None:
    r = verify(task, workspace, FakeRewardExecutor({"reward.json": '{"a": 1, "b": 0.5, "c": 0}'}))
    assert r.ok and r.reward == 0.5 and r.subscores == {"a": 1.0, "b": 0.5, "c": 0.0}


def test_explicit_reward_key(task: Task, workspace: Path) -> None:
    r = verify(task, workspace, FakeRewardExecutor({"reward.json": '{"reward": 0.25, "x": 1}'}))
    assert r.ok and r.reward == 0.25 and r.subscores == {"x": 1.0}


def test_reward_txt_wins_over_free_form_json(task: Task, workspace: Path) -> None:
    files = {
        "reward.txt": "0.5",
        "reward.json": '{"reward": 0.9, "tests_passed": 12, "frac": 0.25}',
    }
    r = verify(task, workspace, FakeRewardExecutor(files))
    assert r.ok and r.reward == 0.5 and r.subscores == {"frac": 0.25}
    garbled = {"reward.txt": "0.5", "reward.json": "{oops"}
    assert verify(task, workspace, FakeRewardExecutor(garbled)).subscores == {}
    bad_txt = {"reward.txt": "2", "reward.json": '{"reward": 1}'}
    assert verify(task, workspace, FakeRewardExecutor(bad_txt)).status is VerifierStatus.ERROR


def test_reward_txt(task: Task, workspace: Path) -> None:
    r = verify(task, workspace, FakeRewardExecutor({"reward.txt": " 0.75\n"}))
    assert r.ok and r.reward == 0.75 and r.subscores == {}


@pytest.mark.parametrize(
    ("files", "reason"),
    [
        ({}, "no reward"),
        ({"reward.txt": ""}, "not a number"),
        ({"reward.txt": "abc"}, "not a number"),
        ({"reward.txt": "nan"}, "not finite"),
        ({"reward.txt": "inf"}, "not finite"),
        ({"reward.txt": "1.5"}, "outside [0, 1]"),
        ({"reward.txt": "-0.1"}, "outside [0, 1]"),
        ({"reward.json": "{not json"}, "bad reward"),
        ({"reward.json": "{}"}, "non-empty JSON object"),
        ({"reward.json": "[1]"}, "non-empty JSON object"),
        ({"reward.json": '{"a": NaN}'}, "not finite"),
        ({"reward.json": '{"a": true}'}, "not a number"),
        ({"reward.json": '{"a": 1, "b": 2}'}, "outside [0, 1]"),
        ({"reward.json": '{"reward": "high"}'}, "not a number"),
    ],
)
def test_garbled_rewards_fail(
    task: Task, workspace: Path, files: dict[str, str], reason: str
) -> None:
    status, reward, why = run_fake(task, workspace, files)
    assert status is VerifierStatus.ERROR
    assert reward == 0.0
    assert reason in why


@settings(max_examples=200, deadline=None)
@given(value=st.floats(allow_nan=True, allow_infinity=True))
def test_reward_txt_accepts_exactly_unit_interval(task: Task, value: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        r = verify(task, Path(tmp), FakeRewardExecutor({"reward.txt": repr(value)}))
    if math.isfinite(value) and 0.0 <= value <= 1.0:
        assert r.ok and r.reward == value
    else:
        assert r.status is VerifierStatus.ERROR and r.reward == 0.0


def test_stdout_channel_parsing(workspace: Path) -> None:
    task = load_task(FIXTURES / "clawgym_word_stats")
    ok = verify(task, workspace, FakeRewardExecutor({}, stdout='{"a": 1, "b": 0}\n0.5\n'))
    assert ok.ok and ok.reward == 0.5 and ok.subscores == {"a": 1.0, "b": 0.0}
    for stdout, reason in [
        ("", "printed nothing"),
        ("{}\nlots\n", "not a number"),
        ("2\n", "outside"),
    ]:
        bad = verify(task, workspace, FakeRewardExecutor({}, stdout=stdout))
        assert bad.status is VerifierStatus.ERROR and reason in bad.reason


def test_infra_error_is_not_a_score(task: Task, workspace: Path) -> None:
    class Broken:
        def run(self, spec: ExecSpec) -> ExecResult:
            raise ExecutorError("podman is gone")

    r = verify(task, workspace, Broken())
    assert (
        r.status is VerifierStatus.INFRA_ERROR and r.reward == 0.0 and "podman is gone" in r.reason
    )


# --------------------------------------------------------------- real local verifiers


def test_verifier_timeout(tmp_path: Path) -> None:
    t = make_task(tmp_path / "task", "import time\ntime.sleep(30)\n", verifier_s=1)
    ws = tmp_path / "ws"
    ws.mkdir()
    r = verify(t, ws)
    assert r.status is VerifierStatus.TIMEOUT and r.reward == 0.0
    assert r.duration_s < 10


def test_crashing_verifier_is_error(tmp_path: Path) -> None:
    t = make_task(tmp_path / "task", "raise SystemExit('boom')\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    r = verify(t, ws)
    assert r.status is VerifierStatus.ERROR and "boom" in r.stderr and r.exit_code == 1


@pytest.mark.parametrize("code", ["sys.exit(3)", "os.kill(os.getpid(), signal.SIGKILL)"])
def test_nonzero_exit_with_valid_reward_is_error(tmp_path: Path, code: str) -> None:
    """A verifier that exits non-zero or is killed is never scored, whatever reward it wrote
    (code it ran may have written the reward and then killed it)."""
    check = f"""
    import os, pathlib, signal, sys
    pathlib.Path(os.environ["CLAWRL_REWARD_DIR"], "reward.txt").write_text("1.0")
    {code}
    """
    t = make_task(tmp_path / "task", check)
    ws = tmp_path / "ws"
    ws.mkdir()
    r = verify(t, ws)
    assert r.status is VerifierStatus.ERROR and r.reward == 0.0, r
    assert r.exit_code in (3, -9) and "not trusted" in r.reason


class ExitCodeExecutor:
    """Test double: writes a valid reward, then reports the given exit code."""

    def __init__(self, exit_code: int | None) -> None:
        self.exit_code = exit_code

    def run(self, spec: ExecSpec) -> ExecResult:
        reward_dir = next(m.source for m in spec.mounts if m.target == "/logs/verifier")
        (reward_dir / "reward.txt").write_text("1.0")
        return ExecResult(exit_code=self.exit_code, stdout="1.0\n", stderr="", duration_s=0.0)


@pytest.mark.parametrize("exit_code", [1, 137, -9, None])
def test_executor_reported_failure_is_error(
    task: Task, workspace: Path, exit_code: int | None
) -> None:
    r = verify(task, workspace, ExitCodeExecutor(exit_code))
    assert r.status is VerifierStatus.ERROR and r.reward == 0.0
    assert verify(task, workspace, ExitCodeExecutor(0)).reward == 1.0


def test_uncopyable_workspace_is_a_failed_result(task: Task, tmp_path: Path) -> None:
    """A workspace copytree cannot copy (here: a path longer than PATH_MAX) is a failed
    result with its reason, never an exception."""
    ws = tmp_path / "ws"
    ws.mkdir()
    fd = os.open(ws, os.O_RDONLY)
    try:
        for _ in range(40):  # 40 x 200 characters: 8000 > PATH_MAX, built with relative paths
            name = "d" * 200
            os.mkdir(name, dir_fd=fd)
            new = os.open(name, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = new
        os.close(os.open("f", os.O_WRONLY | os.O_CREAT, dir_fd=fd))
    finally:
        os.close(fd)
    r = verify(task, ws, FakeRewardExecutor({"reward.txt": "1"}))
    assert r.status is VerifierStatus.ERROR and r.reward == 0.0
    assert "cannot copy the workspace" in r.reason
    shutil.rmtree(ws, ignore_errors=True)


def test_host_verification_refused_for_workspace_code(tmp_path: Path) -> None:
    """verify() never runs a verifier that executes workspace code on the host, unless the
    LocalExecutor vouches for the workspace."""
    marker = tmp_path / "ran"
    t = make_task(tmp_path / "task", f"open({str(marker)!r}, 'w').write('x')\n", executes=True)
    ws = tmp_path / "ws"
    ws.mkdir()
    for executor in (None, LocalExecutor()):
        with pytest.raises(HostVerificationError) as info:
            verify(t, ws, executor)
        assert info.value.task_ids == ["t"]
    assert not marker.exists()
    fix_median = load_task(builtin_suite_dir() / "fix_median")
    assert fix_median.verifier_executes_workspace_code
    with pytest.raises(HostVerificationError):
        verify(fix_median, prepare_workspace(fix_median, tmp_path / "fm"), LocalExecutor())
    trusted = verify(t, ws, LocalExecutor(trust_workspace_code=True))
    assert marker.exists() and trusted.status is VerifierStatus.ERROR  # ran; wrote no reward


# ---------------------------------------------------------------------- tamper tests

FAKE_REWARD = '{"reward": 1.0}'


def plant_fake_rewards(ws: Path) -> None:
    """What a cheating agent leaves behind: reward files wherever a verifier might look."""
    for rel in [
        "reward.json",
        "reward.txt",
        "logs/verifier/reward.json",
        "logs/verifier/reward.txt",
        "tests/reward.json",
        "output/reward.json",
    ]:
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(FAKE_REWARD if rel.endswith(".json") else "1.0")
    # a modified copy of "the verifier" that would award full marks
    (ws / "tests" / "check.py").write_text(
        "import os, pathlib\n"
        "pathlib.Path(os.environ.get('CLAWRL_REWARD_DIR', '/logs/verifier'), 'reward.txt').write_text('1')\n"
    )
    (ws / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")


def _trusted_local() -> Executor:
    # the fixtures below run planted agent code on the host on purpose: what contains it
    # there is the checker's privilege drop, not the sandbox
    return LocalExecutor(trust_workspace_code=True)


EXECUTORS: list[tuple[str, Callable[[], Executor]]] = [("local", _trusted_local)]
if shutil.which("podman"):
    EXECUTORS.append(("sandbox", SandboxExecutor))


@pytest.mark.parametrize(("name", "make_executor"), EXECUTORS, ids=[n for n, _ in EXECUTORS])
def test_tamper_fake_reward_files_builtin(
    name: str, make_executor: Callable[[], Executor], tmp_path: Path
) -> None:
    task = load_task(builtin_suite_dir() / "todo_mark_done")
    ws = prepare_workspace(task, tmp_path / "ws")
    plant_fake_rewards(ws)
    before = sorted(p.relative_to(ws).as_posix() for p in ws.rglob("*"))
    r = verify(task, ws, make_executor())
    assert r.ok, r.reason
    assert r.reward == 0.0
    assert sorted(p.relative_to(ws).as_posix() for p in ws.rglob("*")) == before  # untouched


@pytest.mark.parametrize(("name", "make_executor"), EXECUTORS, ids=[n for n, _ in EXECUTORS])
def test_tamper_harbor_fake_reward(
    name: str, make_executor: Callable[[], Executor], tmp_path: Path
) -> None:
    task = load_task(FIXTURES / "harbor_greeting")
    ws = prepare_workspace(task, tmp_path / "ws")
    plant_fake_rewards(ws)
    r = verify(task, ws, make_executor())
    assert r.ok and r.reward == 0.0


@pytest.mark.parametrize(("name", "make_executor"), EXECUTORS, ids=[n for n, _ in EXECUTORS])
def test_tamper_clawgym_modified_verifier(
    name: str, make_executor: Callable[[], Executor], tmp_path: Path
) -> None:
    task = load_task(FIXTURES / "clawgym_word_stats")
    ws = prepare_workspace(task, tmp_path / "ws")
    plant_fake_rewards(ws)
    # the agent rewrites the verifier paths it can guess inside its own workspace
    (ws / "reward").mkdir()
    (ws / "reward" / "check.py").write_text(
        'print(\'{"stats_lines": 1, "stats_words": 1, "longest": 1}\')\n'
    )
    (ws / "reward" / "reward.sh").write_text("echo '{\"x\": 1}'\necho 1.0\n")
    r = verify(task, ws, make_executor())
    assert r.ok, r.reason
    assert r.reward == 0.0 and r.subscores == {
        "stats_lines": 0.0,
        "stats_words": 0.0,
        "longest": 0.0,
    }
    assert (ws / "reward" / "reward.sh").read_text() == "echo '{\"x\": 1}'\necho 1.0\n"


@pytest.mark.parametrize(("name", "make_executor"), EXECUTORS, ids=[n for n, _ in EXECUTORS])
def test_tamper_agent_code_writes_reward(
    name: str, make_executor: Callable[[], Executor], tmp_path: Path
) -> None:
    """Code the verifier executes (the agent's 'fix') tries to write the reward itself."""
    task = load_task(builtin_suite_dir() / "fix_median")
    ws = prepare_workspace(task, tmp_path / "ws")
    fake = json.dumps({"odd_unsorted": 1, "even_sorted": 1, "even_unsorted": 1})
    (ws / "stats.py").write_text(
        "import os, pathlib\n"
        f"FAKE = {fake!r}\n"
        "for d in [os.environ.get('CLAWRL_REWARD_DIR', ''), '/logs/verifier', '../reward']:\n"
        "    try:\n"
        "        pathlib.Path(d, 'reward.json').write_text(FAKE)\n"
        "    except Exception:\n"
        "        pass\n"
        "def median(values):\n"
        "    return values[0]\n"
    )
    r = verify(task, ws, make_executor())
    assert r.ok, r.reason
    assert r.reward == 0.0


def test_escaping_symlinks_are_dropped(tmp_path: Path) -> None:
    check = """
    import json, os, pathlib
    ws = pathlib.Path(os.environ["CLAWRL_WORKSPACE"])
    scores = {
        "escaping_abs": float(os.path.lexists(ws / "out" / "abs")),
        "escaping_rel": float(os.path.lexists(ws / "out" / "rel")),
        "internal": float((ws / "out" / "inner").is_symlink()),
    }
    pathlib.Path(os.environ["CLAWRL_REWARD_DIR"], "reward.json").write_text(json.dumps(scores))
    """
    t = make_task(tmp_path / "task", check, files={"expected.txt": "secret answer\n"})
    ws = tmp_path / "ws"
    (ws / "out").mkdir(parents=True)
    (ws / "data.txt").write_text("x")
    os.symlink("/tests/expected.txt", ws / "out" / "abs")
    os.symlink("../../tests/expected.txt", ws / "out" / "rel")
    os.symlink("../data.txt", ws / "out" / "inner")
    r = verify(t, ws)
    assert r.ok, r.reason
    assert r.subscores == {"escaping_abs": 0.0, "escaping_rel": 0.0, "internal": 1.0}
    assert (ws / "out" / "abs").is_symlink()  # the agent's workspace itself is not modified


def test_fifo_in_workspace_does_not_break_verification(tmp_path: Path) -> None:
    task = load_task(builtin_suite_dir() / "todo_mark_done")
    ws = prepare_workspace(task, tmp_path / "ws")
    os.mkfifo(ws / "trap")
    r = verify(task, ws)
    assert r.ok and r.reward == 0.0
