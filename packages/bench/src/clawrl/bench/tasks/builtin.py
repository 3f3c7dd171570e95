"""The built-in layout (docs/architecture.md, "Task").

``task.toml`` with ``id``, ``instruction`` (or ``instruction.md``), ``category``,
``difficulty``, ``[timeouts]``, ``[limits]``, ``network``,
``verifier_executes_workspace_code`` (default true: whether the verifier runs agent-written
code, which rules out host verification); ``environment/`` (workspace files), ``tests/``
(verifier: ``test.sh`` or ``check.py``), ``solution/solve.sh`` (oracle).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clawrl.bench.errors import TaskLoadError
from clawrl.bench.task import (
    CATEGORIES,
    DIFFICULTIES,
    REWARD_MOUNT,
    SOLUTION_MOUNT,
    TESTS_MOUNT,
    Layout,
    Task,
    TaskLimits,
    Timeouts,
    VerifierSpec,
    WorkspaceSource,
)
from clawrl.bench.tasks.base import TaskLayout, make_task
from clawrl.bench.tasks.files import read_instruction, read_toml, solution_spec, toml_table

__all__ = ["BuiltinLayout", "builtin_task", "load_builtin"]

_BUILTIN_KEYS = {
    "id",
    "instruction",
    "category",
    "difficulty",
    "network",
    "timeouts",
    "limits",
    "metadata",
    "verifier_executes_workspace_code",
}


def load_builtin(root: Path) -> Task:
    """The built-in task in the directory ``root`` (its ``task.toml``, see the module
    docstring).

    Raises:
        TaskLoadError: the directory is not a valid task; ``reason`` says why.
    """
    return builtin_task(root, read_toml(root / "task.toml"))


def builtin_task(root: Path, data: dict[str, Any]) -> Task:
    """The built-in task of the ``task.toml`` fields ``data`` whose other files
    (``environment/``, ``tests/``, ``solution/``, ``instruction.md``) are in ``root``.

    Raises:
        TaskLoadError: a field or file is missing or invalid; ``reason`` says why.
    """
    unknown = set(data) - _BUILTIN_KEYS
    if unknown:
        raise TaskLoadError(root, f"task.toml: unknown keys {sorted(unknown)}")
    task_id = data.get("id")
    if not isinstance(task_id, str) or not task_id:
        raise TaskLoadError(root, "task.toml: `id` must be a non-empty string")
    category = data.get("category")
    if category not in CATEGORIES:
        raise TaskLoadError(
            root, f"task.toml: category {category!r} is not one of {sorted(CATEGORIES)}"
        )
    difficulty = data.get("difficulty")
    if difficulty not in DIFFICULTIES:
        raise TaskLoadError(root, f"task.toml: difficulty {difficulty!r} not in {DIFFICULTIES}")
    network = data.get("network", False)
    if not isinstance(network, bool):
        raise TaskLoadError(root, "task.toml: `network` must be true or false")
    executes = data.get("verifier_executes_workspace_code", True)
    if not isinstance(executes, bool):
        raise TaskLoadError(
            root, "task.toml: `verifier_executes_workspace_code` must be true or false"
        )
    tests = root / "tests"
    if (tests / "test.sh").is_file():
        command: tuple[str, ...] = ("bash", f"{TESTS_MOUNT}/test.sh")
    elif (tests / "check.py").is_file():
        command = ("python3", f"{TESTS_MOUNT}/check.py")
    else:
        raise TaskLoadError(root, "no verifier: tests/test.sh or tests/check.py is missing")
    workspace = "/workspace"
    env_dir = root / "environment"
    sources = (WorkspaceSource(src=env_dir, dest="."),) if env_dir.is_dir() else ()
    metadata = toml_table(root, data, "metadata")
    return make_task(
        id=task_id,
        instruction=read_instruction(root, data.get("instruction")),
        category=category,
        difficulty=difficulty,
        layout=Layout.BUILTIN,
        root=root,
        workspace_path=workspace,
        workspace_sources=sources,
        timeouts=Timeouts(**toml_table(root, data, "timeouts")),
        limits=TaskLimits(**toml_table(root, data, "limits")),
        network=network,
        verifier=VerifierSpec(
            files_dir=tests,
            mount_path=TESTS_MOUNT,
            command=command,
            reward_channel="file",
            env={
                "CLAWRL_WORKSPACE": workspace,
                "CLAWRL_TESTS": TESTS_MOUNT,
                "CLAWRL_REWARD_DIR": REWARD_MOUNT,
            },
            executes_workspace_code=executes,
        ),
        solution=solution_spec(root, ("bash", f"{SOLUTION_MOUNT}/solve.sh")),
        metadata=metadata,
    )


class BuiltinLayout(TaskLayout):
    """The built-in layout: a ``task.toml`` with a top-level ``id``."""

    name = Layout.BUILTIN.value

    def detect(self, path: Path) -> bool:
        return (path / "task.toml").is_file() and "id" in read_toml(path / "task.toml")

    def load(self, path: Path) -> Task:
        return load_builtin(path)
