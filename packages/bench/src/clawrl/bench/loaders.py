"""Loaders for the three task layouts, auto-detected by :func:`load_task`.

* **built-in** (docs/architecture.md, "Task"): ``task.toml`` with ``id``, ``instruction`` (or
  ``instruction.md``), ``category``, ``difficulty``, ``[timeouts]``, ``[limits]``,
  ``network``, ``verifier_executes_workspace_code`` (default true: whether the verifier runs
  agent-written code, which rules out host verification); ``environment/`` (workspace
  files), ``tests/`` (verifier: ``test.sh`` or ``check.py``), ``solution/solve.sh`` (oracle).
* **Harbor / Terminal-Bench 2**: ``instruction.md``; ``task.toml`` with ``[agent]
  timeout_sec``, ``[verifier] timeout_sec``, ``[environment] cpus, memory_mb, storage_mb``
  (or the strings ``memory = "4G"``, ``storage = "10G"``), ``allow_internet``,
  ``[metadata]`` (a network unless ``allow_internet = false``, Harbor's default);
  ``environment/Dockerfile`` (built into the task's image by the rollout
  runner, :mod:`clawrl.bench.task_image`; its ``ENV`` values are also read here, ``$VAR``
  expanded, for runs without images); ``tests/test.sh`` writing
  ``/logs/verifier/reward.txt`` or ``reward.json``; optional ``solution/solve.sh``.
* **ClawGym-Bench**: ``data_entry.json`` (``task_id``, ``user_query``,
  ``input_mount_dir``), ``input_files/``, ``reward/check.py`` and ``reward/reward.sh``
  (prints the reward as its last line); optional ``solution/solve.sh`` (our extension).

* **Terminal-Bench 1**: ``task.yaml``, ``Dockerfile``, ``docker-compose.yaml`` (one
  service), ``run-tests.sh``, ``tests/``, ``solution.sh`` (:mod:`clawrl.bench.loaders_tb1`).

* **AgentBench OS**: a suite directory of ``.json`` arrays of tasks, loaded by
  :func:`load_suite` when it holds no task directory (:mod:`clawrl.bench.agentbench_os`).

Detection: ``data_entry.json`` → ClawGym; ``task.toml`` with a top-level ``id`` → built-in;
any other ``task.toml`` → Harbor; ``task.yaml`` → Terminal-Bench 1. Every failure raises :class:`TaskLoadError` with the reason.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from collections.abc import Iterable
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import Any

from clawrl.bench.clawgym import CHECKER_JSON, VERIFY_SCRIPT, with_clawgym_image
from clawrl.bench.errors import TaskLoadError
from clawrl.bench.staging import stage_files
from clawrl.bench.task import (
    CATEGORIES,
    DIFFICULTIES,
    REWARD_MOUNT,
    SOLUTION_MOUNT,
    TESTS_MOUNT,
    UNPRIVILEGED_USER,
    Layout,
    SolutionSpec,
    Task,
    TaskLimits,
    Timeouts,
    VerifierSpec,
    WorkspaceSource,
)
from clawrl.bench.verdict_reports import runner_env, runner_files
from clawrl.sandbox import SandboxSpecError, parse_size
from pydantic import ValidationError

__all__ = ["builtin_suite_dir", "detect_layout", "load_builtin_suite", "load_suite", "load_task"]

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


def detect_layout(path: Path | str) -> Layout:
    """Return the layout of the task directory ``path``.

    Raises:
        TaskLoadError: ``path`` is not a directory, or holds neither ``data_entry.json`` nor
            ``task.toml``, or its ``task.toml`` is not valid TOML.
    """
    root = Path(path)
    if not root.is_dir():
        raise TaskLoadError(root, "not a directory")
    if (root / "data_entry.json").is_file():
        return Layout.CLAWGYM
    toml_path = root / "task.toml"
    if toml_path.is_file():
        data = _read_toml(toml_path)
        return Layout.BUILTIN if "id" in data else Layout.HARBOR
    if (root / "task.yaml").is_file():
        return Layout.TB1
    raise TaskLoadError(
        root,
        "no task.toml (built-in or Harbor layout), task.yaml (Terminal-Bench 1) or "
        "data_entry.json (ClawGym layout)",
    )


def load_task(path: Path | str) -> Task:
    """Load the task directory ``path`` in whichever layout it is written; a ClawGym task
    gets the ClawGym image of its own imports (:func:`clawrl.bench.clawgym.with_clawgym_image`).

    Raises:
        TaskLoadError: the directory is not a valid task; ``reason`` says why.
    """
    task = _load_one(path)
    return with_clawgym_image([task])[0] if task.layout is Layout.CLAWGYM else task


def _load_one(path: Path | str) -> Task:
    root = Path(path).resolve()
    layout = detect_layout(root)
    try:
        if layout is Layout.CLAWGYM:
            return _load_clawgym(root)
        if layout is Layout.BUILTIN:
            return _load_builtin(root)
        if layout is Layout.TB1:
            from clawrl.bench.loaders_tb1 import load_tb1

            return load_tb1(root)
        return _load_harbor(root)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise TaskLoadError(root, f"invalid field {where!r}: {first['msg']}") from exc


def load_suite(path: Path | str) -> list[Task]:
    """Load every task directory directly under ``path`` (sorted by task id).

    ``path`` may also be a single task directory. Hidden directories and directories
    without any task file are skipped; a directory that looks like a task but fails to load
    raises. ClawGym tasks share one ClawGym image built from the imports of all of them
    (:func:`clawrl.bench.clawgym.with_clawgym_image`).

    Raises:
        TaskLoadError: a task failed to load, ``path`` is not a directory, no task was
            found, or two tasks share an id.
    """
    root = Path(path)
    if not root.is_dir():
        raise TaskLoadError(root, "not a directory")
    if _looks_like_task(root):
        return [load_task(root)]
    tasks = [
        _load_one(child)
        for child in sorted(root.iterdir())
        if child.is_dir() and not child.name.startswith((".", "_")) and _looks_like_task(child)
    ]
    if not tasks:
        from clawrl.bench.agentbench_os import is_agentbench_file, load_agentbench_os

        if any(is_agentbench_file(p) for p in root.iterdir()):
            return _check_unique(root, load_agentbench_os(root))
        raise TaskLoadError(root, "no task directories (or AgentBench OS .json files) found")
    return _check_unique(root, with_clawgym_image(tasks))


def builtin_suite_dir() -> Path:
    """Host path of the built-in suite shipped as package data (one directory per task)."""
    return Path(str(resources.files("clawrl.bench").joinpath("tasks_data", "builtin")))


def load_builtin_suite(
    categories: Iterable[str] | None = None, difficulties: Iterable[str] | None = None
) -> list[Task]:
    """Load the built-in suite, optionally filtered by category keys and difficulties."""
    tasks = load_suite(builtin_suite_dir())
    if categories is not None:
        wanted = set(categories)
        tasks = [t for t in tasks if t.category in wanted]
    if difficulties is not None:
        levels = set(difficulties)
        tasks = [t for t in tasks if t.difficulty in levels]
    return tasks


# --------------------------------------------------------------------------- helpers


def _looks_like_task(path: Path) -> bool:
    return any((path / name).is_file() for name in ("task.toml", "task.yaml", "data_entry.json"))


def _check_unique(root: Path, tasks: list[Task]) -> list[Task]:
    seen: dict[str, Path] = {}
    for task in tasks:
        if task.id in seen:
            raise TaskLoadError(
                root, f"duplicate task id {task.id!r} ({seen[task.id]}, {task.root})"
            )
        seen[task.id] = task.root
    return sorted(tasks, key=lambda t: t.id)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise TaskLoadError(path.parent, f"{path.name} is not valid TOML: {exc}") from exc
    except OSError as exc:
        raise TaskLoadError(path.parent, f"cannot read {path.name}: {exc}") from exc


def _read_text(root: Path, name: str) -> str:
    path = root / name
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise TaskLoadError(root, f"{name} is not UTF-8: {exc}") from exc
    except OSError as exc:
        raise TaskLoadError(root, f"cannot read {name}: {exc}") from exc


def _table(root: Path, data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise TaskLoadError(root, f"task.toml: [{key}] must be a table")
    return value


def _instruction(root: Path, inline: Any) -> str:
    if inline is not None and not isinstance(inline, str):
        raise TaskLoadError(root, "instruction must be a string")
    has_file = (root / "instruction.md").is_file()
    if inline and has_file:
        raise TaskLoadError(root, "both an inline instruction and instruction.md")
    text = inline if inline else (_read_text(root, "instruction.md") if has_file else "")
    if not text.strip():
        raise TaskLoadError(root, "no instruction (inline `instruction` or instruction.md)")
    return text.strip()


def _solution(root: Path, command: tuple[str, ...]) -> SolutionSpec | None:
    sol = root / "solution"
    if not (sol / "solve.sh").is_file():
        return None
    return SolutionSpec(files_dir=sol, mount_path=SOLUTION_MOUNT, command=command)


def _load_builtin(root: Path) -> Task:
    data = _read_toml(root / "task.toml")
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
    metadata = _table(root, data, "metadata")
    return Task(
        id=task_id,
        instruction=_instruction(root, data.get("instruction")),
        category=category,
        difficulty=difficulty,
        layout=Layout.BUILTIN,
        root=root,
        workspace_path=workspace,
        workspace_sources=sources,
        timeouts=Timeouts(**_table(root, data, "timeouts")),
        limits=TaskLimits(**_table(root, data, "limits")),
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
        solution=_solution(root, ("bash", f"{SOLUTION_MOUNT}/solve.sh")),
        metadata=metadata,
    )


# ---------------------------------------------------------------- Harbor / TB2


def _number(root: Path, table: dict[str, Any], key: str, section: str) -> float | None:
    value = table.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TaskLoadError(root, f"task.toml: [{section}] {key} must be a number")
    return float(value)


def _dockerfile_lines(text: str) -> list[str]:
    lines: list[str] = []
    buf = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        buf += stripped
        lines.append(buf.strip())
        buf = ""
    if buf.strip():
        lines.append(buf.strip())
    return lines


#: The PATH of the registry base images (and of clawrl's sandboxes): what ``$PATH`` means
#: in an ``ENV`` line when the Dockerfile did not set it before.
_BASE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
_ENV_VAR = re.compile(r"\$\{(\w+)\}|\$(\w+)")


def _expand_env(value: str, env: dict[str, str]) -> str:
    """``$VAR`` / ``${VAR}`` in an ``ENV`` value, from the earlier ``ENV`` lines (then the
    base image's ``PATH``); an unknown variable becomes "" as in Docker."""

    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        return env.get(name, _BASE_ENV.get(name, ""))

    return _ENV_VAR.sub(one, value)


def _parse_dockerfile(root: Path, path: Path) -> dict[str, Any]:
    """Read the few Dockerfile instructions clawrl can honour without building the image."""
    text = _read_text(root, str(path.relative_to(root)))
    image: str | None = None
    workdir = "/"
    seen_workdir = False
    copies: list[tuple[str, str, str]] = []  # (workdir at the time, src, dest)
    runs: list[str] = []
    env: dict[str, str] = {}
    for line in _dockerfile_lines(text):
        op, _, rest = line.partition(" ")
        op = op.upper()
        rest = rest.strip()
        if op == "FROM":
            image = rest.split()[0] if rest else None
        elif op == "WORKDIR":
            workdir = str(PurePosixPath(workdir) / rest)
            seen_workdir = True
        elif op in ("COPY", "ADD"):
            if rest.startswith("["):
                try:
                    parts = [str(p) for p in json.loads(rest)]
                except json.JSONDecodeError as exc:
                    raise TaskLoadError(root, f"Dockerfile: bad {op} line {line!r}") from exc
            else:
                parts = [p for p in shlex.split(rest) if not p.startswith("--")]
            if len(parts) < 2:
                raise TaskLoadError(root, f"Dockerfile: bad {op} line {line!r}")
            for src in parts[:-1]:
                copies.append((workdir, src, parts[-1]))
        elif op == "RUN":
            runs.append(rest)
        elif op == "ENV":
            if "=" in rest.split()[0] if rest else False:
                for item in shlex.split(rest):
                    key, _, value = item.partition("=")
                    env[key] = _expand_env(value, env)
            elif rest:
                key, _, value = rest.partition(" ")
                env[key] = _expand_env(value.strip(), env)
    return {
        "image": image,
        "workdir": workdir if seen_workdir else "/app",
        "copies": copies,
        "runs": runs,
        "env": env,
    }


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


def _dockerfile_workspace(
    root: Path, dockerfile: Path, context: Path
) -> tuple[dict[str, Any], PurePosixPath, list[WorkspaceSource], list[str]]:
    """What a Dockerfile says about the workspace: its parsed lines, the workspace (last
    ``WORKDIR``, default ``/app``), the ``COPY``/``ADD`` sources (from ``context``) that land
    in it, and notes on those that land elsewhere (only the image build places them).

    A source that does not exist in ``context`` (a glob, or a file the task lacks) is only
    noted: the image build places it, or fails as that task's ``env-error``.

    Raises:
        TaskLoadError: the Dockerfile cannot be read, or a source lies outside ``context``.
    """
    parsed: dict[str, Any] = (
        _parse_dockerfile(root, dockerfile)
        if dockerfile.is_file()
        else {"image": None, "workdir": "/app", "copies": [], "runs": [], "env": {}}
    )
    workdir = PurePosixPath(parsed["workdir"])
    sources: list[WorkspaceSource] = []
    notes: list[str] = []
    context = context.resolve()
    where = context.relative_to(root.resolve()).as_posix() if context != root else "."
    for at, src, dest in parsed["copies"]:
        dest_path = PurePosixPath(at) / dest
        host = (context / src).resolve()
        if not host.is_relative_to(context):
            raise TaskLoadError(root, f"Dockerfile: COPY source {src!r} not in {where}/")
        if not host.exists():
            # a glob, or a file the task forgot: the image build places it or fails (an
            # env-error of this task, not a suite that cannot load)
            notes.append(f"COPY {src}: no such path in {where}/; left to the image build")
            continue
        if dest_path == workdir or workdir in dest_path.parents:
            rel = str(dest_path.relative_to(workdir)) or "."
            if host.is_file() and dest.endswith("/"):
                rel = str(PurePosixPath(rel) / host.name)
            sources.append(WorkspaceSource(src=host, dest=rel))
        else:
            notes.append(
                f"COPY {src} {dest_path}: outside the workspace {workdir}, placed only by the "
                "image build"
            )
    return parsed, workdir, sources, notes


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


def _load_harbor(root: Path) -> Task:
    data = _read_toml(root / "task.toml")
    agent = _table(root, data, "agent")
    verifier = _table(root, data, "verifier")
    environment = _table(root, data, "environment")
    metadata = _table(root, data, "metadata")
    if not (root / "instruction.md").is_file():
        raise TaskLoadError(root, "Harbor layout: instruction.md is missing")
    if not (root / "tests" / "test.sh").is_file():
        raise TaskLoadError(root, "Harbor layout: tests/test.sh is missing")
    dockerfile = root / "environment" / "Dockerfile"
    parsed, workdir, sources, notes = _dockerfile_workspace(root, dockerfile, root / "environment")
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
    return Task(
        id=root.name,
        instruction=_instruction(root, None),
        category=category if isinstance(category, str) else None,
        difficulty=difficulty if isinstance(difficulty, str) else None,
        layout=Layout.HARBOR,
        root=root,
        workspace_path=str(workdir),
        workspace_sources=tuple(sources),
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
        solution=_solution(root, ("bash", f"{SOLUTION_MOUNT}/solve.sh")),
        image=parsed["image"],
        setup_commands=tuple(parsed["runs"]),
        dockerfile=dockerfile if dockerfile.is_file() else None,
        env=parsed["env"],
        notes=tuple(notes),
        metadata=metadata,
    )


# ------------------------------------------------------------------- ClawGym


def _load_clawgym(root: Path) -> Task:
    try:
        entry = json.loads(_read_text(root, "data_entry.json"))
    except json.JSONDecodeError as exc:
        raise TaskLoadError(root, f"data_entry.json is not valid JSON: {exc}") from exc
    if not isinstance(entry, dict):
        raise TaskLoadError(root, "data_entry.json must hold a JSON object")
    for key in ("task_id", "user_query", "input_mount_dir"):
        if not isinstance(entry.get(key), str) or not entry[key].strip():
            raise TaskLoadError(root, f"data_entry.json: `{key}` must be a non-empty string")
    mount = PurePosixPath(entry["input_mount_dir"])
    if not mount.is_absolute() or ".." in mount.parts:
        raise TaskLoadError(root, "data_entry.json: `input_mount_dir` must be an absolute path")
    reward = root / "reward"
    if not (reward / "reward.sh").is_file():
        raise TaskLoadError(root, "ClawGym layout: reward/reward.sh is missing")
    inputs = root / "input_files"
    sources = (WorkspaceSource(src=inputs, dest="."),) if inputs.is_dir() else ()
    metadata = {k: v for k, v in entry.items() if k not in ("task_id", "user_query")}
    raw_meta = entry.get("metadata")
    nested: dict[str, Any] = raw_meta if isinstance(raw_meta, dict) else {}
    category = entry.get("category", nested.get("category"))
    difficulty = entry.get("difficulty", nested.get("difficulty"))
    return Task(
        id=entry["task_id"],
        instruction=entry["user_query"].strip(),
        category=category if isinstance(category, str) else None,
        difficulty=difficulty if isinstance(difficulty, str) else None,
        layout=Layout.CLAWGYM,
        root=root,
        workspace_path=str(mount),
        workspace_sources=sources,
        verifier=VerifierSpec(
            files_dir=reward,
            mount_path=str(mount / "reward"),
            command=(
                "bash",
                "-c",
                VERIFY_SCRIPT,
                "clawgym-verify",
                str(mount / "reward"),
                str(mount),
            ),
            reward_channel="stdout",
            subscores_file=CHECKER_JSON,
            user=UNPRIVILEGED_USER,
        ),
        solution=_solution(root, ("bash", f"{SOLUTION_MOUNT}/solve.sh")),
        metadata=metadata,
    )
