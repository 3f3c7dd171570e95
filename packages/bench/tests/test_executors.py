"""LocalExecutor: path translation, environment, timeouts, errors."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from clawrl.bench import ExecSpec, ExecutorError, LocalExecutor, Mount


def test_translates_paths_in_argv_env_and_readonly_files(tmp_path: Path) -> None:
    ws, tests = tmp_path / "ws", tmp_path / "tests"
    ws.mkdir()
    tests.mkdir()
    (tests / "run.sh").write_text(
        'echo "$MYDIR" > /app/out.txt\ncat /tests/data.txt >> /app/out.txt\necho /apple /tests_x >> /app/out.txt\n'
    )
    (tests / "data.txt").write_text("payload\n")
    spec = ExecSpec(
        argv=("bash", "/tests/run.sh"),
        cwd="/app",
        mounts=(Mount(ws, "/app", read_only=False), Mount(tests, "/tests")),
        env={"MYDIR": "/app/sub"},
    )
    res = LocalExecutor().run(spec)
    assert res.exit_code == 0, res.stderr
    lines = (ws / "out.txt").read_text().splitlines()
    assert lines[0] == f"{ws.resolve()}/sub"
    assert lines[1] == "payload"
    assert lines[2] == "/apple /tests_x"  # only whole path components are translated
    assert (tests / "run.sh").read_text().startswith('echo "$MYDIR" > /app/')  # source untouched


def test_minimal_environment(tmp_path: Path) -> None:
    res = LocalExecutor().run(
        ExecSpec(
            argv=("bash", "-c", "echo $PATH; command -v python3; echo ${SECRET:-none}"),
            cwd="/w",
            mounts=(Mount(tmp_path, "/w", read_only=False),),
        )
    )
    assert res.stdout.split() == ["/usr/bin:/bin", "/usr/bin/python3", "none"]


def test_timeout_kills_process_group(tmp_path: Path) -> None:
    start = time.monotonic()
    res = LocalExecutor().run(
        ExecSpec(
            argv=("bash", "-c", "sleep 30 & sleep 30; echo never"),
            cwd="/w",
            mounts=(Mount(tmp_path, "/w", read_only=False),),
            timeout_s=0.5,
        )
    )
    assert res.timed_out and res.exit_code is None and "never" not in res.stdout
    assert time.monotonic() - start < 10


def test_errors(tmp_path: Path) -> None:
    with pytest.raises(ExecutorError, match="not mounted"):
        LocalExecutor().run(ExecSpec(argv=("true",), cwd="/nowhere"))
    with pytest.raises(ExecutorError, match="cannot start"):
        LocalExecutor().run(
            ExecSpec(
                argv=("/no/such/binary",),
                cwd="/w",
                mounts=(Mount(tmp_path, "/w", read_only=False),),
            )
        )
    with pytest.raises(ExecutorError, match="not a directory"):
        LocalExecutor().run(
            ExecSpec(argv=("true",), cwd="/w", mounts=(Mount(tmp_path / "x", "/w"),))
        )
    with pytest.raises(ValueError, match="absolute"):
        Mount(tmp_path, "relative")
