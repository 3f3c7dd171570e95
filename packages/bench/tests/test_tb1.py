"""The Terminal-Bench 1 layout: task.yaml, a single-service docker-compose.yaml,
run-tests.sh graded by pytest's -rA summary, solution.sh as the oracle."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest
from clawrl.bench import Layout, RolloutStatus, TaskLoadError, load_task, run_rollouts
from clawrl.bench.pytest_summary import parse_pytest_summary

FIXTURE = Path(__file__).parent / "fixtures" / "tb1_word_count"

_SUMMARY = """\
=========================== short test summary info ============================
PASSED ../tests/test_outputs.py::test_sample
{second} ../tests/test_outputs.py::test_hidden - AssertionError
SKIPPED [1] ../tests/test_outputs.py:20: later
========================= 1 passed, 1 failed in 0.82s ==========================
"""


def test_pytest_summary_grades_all_or_nothing() -> None:
    assert parse_pytest_summary(_SUMMARY.format(second="PASSED")) == (
        1.0,
        {"test_sample": 1.0, "test_hidden": 1.0},
    )
    assert parse_pytest_summary(_SUMMARY.format(second="FAILED")) == (
        0.0,
        {"test_sample": 1.0, "test_hidden": 0.0},
    )
    # a summary printed by the code under test, before pytest's own, does not count
    fake = _SUMMARY.format(second="PASSED") + "\n" + _SUMMARY.format(second="ERROR")
    assert parse_pytest_summary(fake)[0] == 0.0
    for bad in ("2 passed in 0.1s", "=== short test summary info ===\n=== 0 passed in 0.1s ==="):
        with pytest.raises(ValueError):
            parse_pytest_summary(bad)


def test_tb1_fields() -> None:
    task = load_task(FIXTURE)
    assert task.layout is Layout.TB1 and task.id == "tb1_word_count"
    assert task.instruction.startswith("Write /app/count.py")
    assert task.workspace_path == "/app" and task.image == "python:3.13-slim-bookworm"
    assert task.timeouts.agent_s == 300 and task.timeouts.verifier_s == 180
    assert task.category == "file-operations" and task.difficulty == "easy"
    assert task.network is True  # the compose service keeps the default network
    assert task.env == {"WORD_COUNT_LOCALE": "C"}  # ${T_BENCH_*} entries are the harness's
    assert task.dockerfile == FIXTURE.resolve() / "Dockerfile"
    assert task.build_context == FIXTURE.resolve()
    assert task.verifier.command == ("bash", "/tests/run-tests.sh")
    assert task.verifier.reward_channel == "pytest"
    staged = {p.name for p in task.verifier.files_dir.iterdir()}
    assert staged == {
        ".clawrl",
        "run-tests.sh",
        "test_outputs.py",
        "setup-uv-pytest.sh",
        "run-uv-pytest.sh",
    }
    assert task.solution is not None and task.solution.command[-1] == "/solution/solution.sh"
    assert [(s.src.name, s.dest) for s in task.workspace_sources] == [("sample.txt", "sample.txt")]


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "tb1_task"
    shutil.copytree(FIXTURE, root)
    return root


def test_network_mode_none_keeps_the_verifier_offline(tmp_path: Path) -> None:
    root = _copy(tmp_path)
    compose = (root / "docker-compose.yaml").read_text()
    (root / "docker-compose.yaml").write_text(
        compose.replace("    command:", "    network_mode: none\n    command:")
    )
    assert load_task(root).network is False


def test_cpus_from_compose_else_every_host_cpu(tmp_path: Path) -> None:
    """A public TB1 task (parallelize-compute-squares) gates on a process pool being 30 %
    faster than the sequential run: under Harbor's default of 1 CPU its oracle scored 0
    (t_par 8.08 s vs t_seq 8.20 s). TB1 sets no limit, so every CPU; a compose limit wins."""
    assert load_task(FIXTURE).limits.cpus == float(os.cpu_count() or 1)
    root = _copy(tmp_path)
    compose = (root / "docker-compose.yaml").read_text()
    for cpus, expected in (("1.5", 1.5), ('"${CPUS}"', float(os.cpu_count() or 1))):
        (root / "docker-compose.yaml").write_text(
            compose.replace("    command:", f"    cpus: {cpus}\n    command:")
        )
        assert load_task(root).limits.cpus == expected
    (root / "docker-compose.yaml").write_text(
        compose.replace("    command:", "    cpus: lots\n    command:")
    )
    with pytest.raises(TaskLoadError, match="cpus"):
        load_task(root)


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda r: (r / "run-tests.sh").unlink(), "run-tests.sh"),
        (
            lambda r: (r / "docker-compose.yaml").write_text(
                "services:\n  client:\n    build: .\n  db:\n    image: postgres\n"
            ),
            "exactly one service",
        ),
        (lambda r: (r / "task.yaml").write_text("instruction: [unclosed\n"), "YAML"),
        (lambda r: (r / "task.yaml").write_text("difficulty: easy\n"), "instruction"),
        (
            lambda r: (r / "task.yaml").write_text("instruction: x\nmax_agent_timeout_sec: -1\n"),
            "max_agent_timeout_sec",
        ),
    ],
)
def test_bad_tb1_tasks_are_load_errors(tmp_path: Path, edit: object, needle: str) -> None:
    root = _copy(tmp_path)
    edit(root)  # type: ignore[operator]
    with pytest.raises(TaskLoadError, match=needle):
        load_task(root)


@pytest.mark.podman
@pytest.mark.slow
def test_tb1_task_oracle_passes_noop_scores_zero() -> None:
    """Built from its Dockerfile (FROM python:3.13-slim-bookworm → the local base, RUN
    apt-get), verified by run-tests.sh with the shared-script stand-ins (pip install
    pytest over the verifier's network) and graded from pytest's summary."""
    task = load_task(FIXTURE)
    results = asyncio.run(run_rollouts([task], ["oracle", "noop"], concurrency=2))
    by = {r.harness: r for r in results}
    assert by["oracle"].status is RolloutStatus.OK and by["oracle"].reward == 1.0, by["oracle"]
    assert by["oracle"].subscores == {"test_sample": 1.0, "test_hidden": 1.0}
    # the untouched workspace: pytest ran, both tests failed (exit 1), a scored 0
    assert by["noop"].status is RolloutStatus.OK and by["noop"].reward == 0.0, by["noop"]
    assert by["noop"].subscores == {"test_sample": 0.0, "test_hidden": 0.0}
