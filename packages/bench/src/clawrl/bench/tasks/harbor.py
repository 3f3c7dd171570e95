"""The Harbor / Terminal-Bench 2 layout.

``instruction.md``; ``task.toml`` with ``[agent] timeout_sec``, ``[verifier] timeout_sec``,
``[environment] cpus, memory_mb, storage_mb`` (or the strings ``memory = "4G"``,
``storage = "10G"``), ``allow_internet``, ``[metadata]`` (a network unless
``allow_internet = false``, Harbor's default); ``environment/Dockerfile`` (built into the
task's image by the rollout runner, :mod:`clawrl.bench.task_image`; its ``ENV`` values are
also read here, ``$VAR`` expanded, for runs without images); ``tests/test.sh`` writing
``/logs/verifier/reward.txt`` or ``reward.json``; optional ``solution/solve.sh``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clawrl.bench.errors import TaskLoadError
from clawrl.bench.staging import stage_files
from clawrl.bench.task import (
    REWARD_MOUNT,
    SOLUTION_MOUNT,
    TESTS_MOUNT,
    Layout,
    Task,
    TaskLimits,
    Timeouts,
    VerifierSpec,
)
from clawrl.bench.tasks.base import TaskLayout, make_task
from clawrl.bench.tasks.dockerfile import dockerfile_task_fields
from clawrl.bench.tasks.files import read_instruction, read_toml, solution_spec, toml_table
from clawrl.bench.verdict_reports import runner_env, runner_files
from clawrl.sandbox import SandboxSpecError, parse_size

__all__ = ["HarborLayout", "load_harbor"]


def _number(root: Path, table: dict[str, Any], key: str, section: str) -> float | None:
    value = table.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TaskLoadError(root, f"task.toml: [{section}] {key} must be a number")
    return float(value)


def _string_table(root: Path, table: dict[str, Any], key: str, section: str) -> dict[str, str]:
    """A table of strings (``[verifier] env``); numbers and booleans become strings."""
    value = table.get(key, {})
    if not isinstance(value, dict):
        raise TaskLoadError(root, f"task.toml: [{section}] {key} must be a table")
    out: dict[str, str] = {}
    for k, v in value.items():
        if isinstance(v, dict | list):
            raise TaskLoadError(root, f"task.toml: [{section}] {key}.{k} must be a string")
        out[str(k)] = str(v).lower() if isinstance(v, bool) else str(v)
    return out


def _size_mb(root: Path, environment: dict[str, Any], key: str) -> int | None:
    """Harbor's ``memory`` / ``storage`` (``"4G"``, ``"512M"``, a number of MB) in MB."""
    value = environment.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise TaskLoadError(root, f"task.toml: [environment] {key} must be a size like '4G'")
    if isinstance(value, int | float):
        return int(value)
    try:
        size = parse_size(value.strip().upper().removesuffix("B") or "x")
    except SandboxSpecError as exc:
        raise TaskLoadError(root, f"task.toml: [environment] {key}: {exc}") from None
    return max(1, size >> 20)


def _harbor_limits(root: Path, environment: dict[str, Any]) -> dict[str, Any]:
    """Sandbox limits from Harbor's ``[environment]``: ``cpus`` (a number or a numeric
    string), ``memory_mb`` / ``storage_mb`` or the strings ``memory`` / ``storage``."""
    limits: dict[str, Any] = {}
    cpus = environment.get("cpus")
    if isinstance(cpus, str):
        try:
            cpus = float(cpus)
        except ValueError:
            raise TaskLoadError(root, f"task.toml: [environment] cpus {cpus!r}") from None
        environment = {**environment, "cpus": cpus}
    for key in ("cpus", "memory_mb", "storage_mb"):
        value = _number(root, environment, key, "environment")
        if value is not None:
            limits[key] = value if key == "cpus" else int(value)
    for key in ("memory", "storage"):
        size = _size_mb(root, environment, key)
        if size is not None:
            limits.setdefault(f"{key}_mb", size)
    return limits


def _stage_harbor_tests(root: Path) -> Path:
    """A cached copy of ``tests/`` with clawrl's trusted pytest runner beside it
    (``.clawrl/``, :func:`clawrl.bench.verdict_reports.runner_files`)."""
    tests = root / "tests"
    files = {
        path.relative_to(tests).as_posix(): path.read_bytes()
        for path in sorted(tests.rglob("*"))
        if path.is_file() and not path.is_symlink()
    }
    files.update(runner_files())
    try:
        staged = stage_files("harbor-tests", "1", files)
        for rel in files:  # the staged copy keeps each file's executable bit
            source = tests / rel
            if source.is_file() and source.stat().st_mode & 0o111:
                (staged / rel).chmod((staged / rel).stat().st_mode | 0o111)
    except OSError as exc:
        raise TaskLoadError(root, f"cannot stage tests/: {exc}") from exc
    return staged


def load_harbor(root: Path) -> Task:
    data = read_toml(root / "task.toml")
    agent = toml_table(root, data, "agent")
    verifier = toml_table(root, data, "verifier")
    environment = toml_table(root, data, "environment")
    metadata = toml_table(root, data, "metadata")
    if not (root / "instruction.md").is_file():
        raise TaskLoadError(root, "Harbor layout: instruction.md is missing")
    if not (root / "tests" / "test.sh").is_file():
        raise TaskLoadError(root, "Harbor layout: tests/test.sh is missing")
    dockerfile = root / "environment" / "Dockerfile"
    from_dockerfile = dockerfile_task_fields(root, dockerfile, root / "environment")
    timeouts = {
        k: v
        for k, v in {
            "agent_s": _number(root, agent, "timeout_sec", "agent"),
            "verifier_s": _number(root, verifier, "timeout_sec", "verifier"),
            "build_s": _number(root, environment, "build_timeout_sec", "environment"),
        }.items()
        if v is not None
    }
    limits = _harbor_limits(root, environment)
    # Harbor's default is a network: only `allow_internet = false` (schema 2.0:
    # `network_mode = "none"`) takes it away
    mode = environment.get("network_mode")
    allow_internet = environment.get("allow_internet", mode is None or mode != "none")
    if not isinstance(allow_internet, bool):
        raise TaskLoadError(root, "task.toml: [environment] allow_internet must be a boolean")
    tests = _stage_harbor_tests(root)
    category = metadata.get("category")
    difficulty = metadata.get("difficulty")
    return make_task(
        id=root.name,
        instruction=read_instruction(root, None),
        category=category,
        difficulty=difficulty,
        layout=Layout.HARBOR,
        root=root,
        timeouts=Timeouts(**timeouts),
        limits=TaskLimits(**limits),
        network=allow_internet,
        verifier=VerifierSpec(
            files_dir=tests,
            mount_path=TESTS_MOUNT,
            command=("bash", f"{TESTS_MOUNT}/test.sh"),
            reward_channel="file",
            # Terminal-Bench's test scripts use $TEST_DIR; [verifier] env adds to it
            env={
                "TEST_DIR": TESTS_MOUNT,
                **_string_table(root, verifier, "env", "verifier"),
                **runner_env(TESTS_MOUNT, REWARD_MOUNT),
            },
            trusted_runner=True,
            verify_on_snapshot=True,
        ),
        solution=solution_spec(root, ("bash", f"{SOLUTION_MOUNT}/solve.sh")),
        metadata=metadata,
        **from_dockerfile,
    )


class HarborLayout(TaskLayout):
    """Harbor / Terminal-Bench 2: a ``task.toml`` without a top-level ``id``."""

    name = Layout.HARBOR.value

    def detect(self, path: Path) -> bool:
        return (path / "task.toml").is_file() and "id" not in read_toml(path / "task.toml")

    def load(self, path: Path) -> Task:
        return load_harbor(path)
