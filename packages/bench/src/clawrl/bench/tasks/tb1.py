"""The Terminal-Bench 1 layout (``task.yaml``, ``run-tests.sh``, ``solution.sh``).

A TB1 task directory holds ``task.yaml`` (``instruction`` — or ``descriptions``, whose
``base`` entry is the instruction — ``difficulty``, ``category``, ``tags``,
``max_agent_timeout_sec``, ``max_test_timeout_sec``), a ``Dockerfile`` and a
single-service ``docker-compose.yaml`` (its ``build`` context and dockerfile, its
``environment`` and ``network_mode``), ``run-tests.sh``, ``tests/`` (``test_outputs.py``)
and ``solution.sh``. How clawrl reads it:

* the image is built from the compose service's Dockerfile and context (default: the task
  directory's ``Dockerfile``), the workspace is its last ``WORKDIR`` (default ``/app``);
* the verifier is ``bash /tests/run-tests.sh`` in the task image, with ``TEST_DIR=/tests``;
  its ``pytest`` runs through clawrl's trusted runner, and its reward is read from the
  runner's JUnit XML reports (:mod:`clawrl.bench.verdict_reports`: 1 iff at least one test
  was executed and every executed test passed, one sub-score per test), as TB1's own
  pytest parser grades — never from the output, which the tested code can print into;
* the sandboxes get the compose service's CPU limit (``cpus`` or
  ``deploy.resources.limits.cpus``), else every CPU of the host, as TB1 sets none (memory:
  the default 2048 MB);
* the verifier phase has a network unless the compose service says ``network_mode:
  none`` — TB1 runs its tests in the task's container with the default network, and its
  ``run-tests.sh`` scripts install pytest; the agent phase never has one;
* TB1's shared scripts ``setup-uv-pytest.sh`` / ``run-uv-pytest.sh`` (copied into
  ``$TEST_DIR`` by TB1's harness, the first fetching uv from astral.sh, which is not
  reachable here) are replaced, when ``tests/`` lacks them, by stand-ins: ``pip install
  pytest`` into the image's Python, then ``pytest $TEST_DIR/test_outputs.py -rA``;
* the oracle is ``solution.sh``, else ``solution.yaml`` — TB1's list of terminal commands
  (``command``; ``min_timeout_sec`` = 0, ``max_timeout_sec`` = 180, ``block`` = false,
  ``append_enter`` = false), which TB1's oracle types into a tmux session: clawrl generates
  a ``solution.sh`` that does the same in a tmux session of the task image (each
  ``command`` sent with ``tmux send-keys``, so key names such as ``C-c`` work; ``Enter``
  after it when ``append_enter``; a ``block`` command waits for its end with ``tmux wait``
  up to ``max_timeout_sec``, the others are followed by ``min_timeout_sec`` of sleep);
* the verifier files (``tests/``, ``run-tests.sh``, the stand-ins) and the oracle are
  staged into a content-addressed cache directory, never into the task directory.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

import yaml
from clawrl.bench.errors import TaskLoadError
from clawrl.bench.staging import stage_files
from clawrl.bench.task import (
    REWARD_MOUNT,
    SOLUTION_MOUNT,
    TESTS_MOUNT,
    Layout,
    SolutionSpec,
    Task,
    TaskLimits,
    Timeouts,
    VerifierSpec,
)
from clawrl.bench.tasks.base import TaskLayout, make_task
from clawrl.bench.tasks.dockerfile import dockerfile_task_fields
from clawrl.bench.tasks.files import read_text
from clawrl.bench.verdict_reports import runner_env, runner_files

__all__ = ["TB1_SHARED_SCRIPTS", "TB1Layout", "load_tb1", "solution_yaml_script"]

#: clawrl's stand-ins for TB1's shared test scripts (see the module docstring).
TB1_SHARED_SCRIPTS: dict[str, str] = {
    "setup-uv-pytest.sh": (
        "#!/bin/bash\n# clawrl stand-in for Terminal-Bench 1's setup-uv-pytest.sh: pytest from\n"
        "# PyPI into the image's Python (the original fetches uv from astral.sh)\n"
        "python3 -m pip install --quiet --disable-pip-version-check pytest==8.4.1 \\\n"
        "  || pip install --quiet pytest==8.4.1\n"
    ),
    "run-uv-pytest.sh": (
        "#!/bin/bash\n# clawrl stand-in for Terminal-Bench 1's run-uv-pytest.sh\n"
        'pytest "${TEST_DIR:-/tests}/test_outputs.py" -rA\n'
    ),
}
_STAGE_VERSION = "3"


def _yaml(root: Path, name: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(read_text(root, name))
    except yaml.YAMLError as exc:
        raise TaskLoadError(root, f"{name} is not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise TaskLoadError(root, f"{name} must hold a mapping")
    return data


def _instruction(root: Path, data: dict[str, Any]) -> str:
    text = data.get("instruction")
    if text is None and isinstance(data.get("descriptions"), list):
        for item in data["descriptions"]:
            if isinstance(item, dict) and item.get("key", "base") == "base":
                text = item.get("description")
                break
    if not isinstance(text, str) or not text.strip():
        raise TaskLoadError(root, "task.yaml: no `instruction` (or `descriptions` base entry)")
    return text.strip()


def _seconds(root: Path, data: dict[str, Any], key: str) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise TaskLoadError(root, f"task.yaml: `{key}` must be a positive number")
    return float(value)


def _cpus(root: Path, service: dict[str, Any]) -> float:
    """The service's CPU limit (``cpus`` or ``deploy.resources.limits.cpus``); without one,
    every CPU of this host — TB1 sets none, so its tasks run with all of them (a task's
    speed-up test fails under Harbor's default of 1)."""
    deploy = service.get("deploy")
    resources = deploy.get("resources") if isinstance(deploy, dict) else None
    limits = resources.get("limits") if isinstance(resources, dict) else None
    raw = service.get("cpus", limits.get("cpus") if isinstance(limits, dict) else None)
    if raw is None or "${" in str(raw):  # absent, or a TB1 harness variable
        return float(os.cpu_count() or 1)
    try:
        cpus = float(raw)
    except ValueError:
        raise TaskLoadError(root, f"docker-compose.yaml: cpus {raw!r} is not a number") from None
    if cpus <= 0:
        raise TaskLoadError(root, f"docker-compose.yaml: cpus {raw!r} must be positive")
    return cpus


def _compose(root: Path) -> tuple[Path, Path, dict[str, str], bool, float]:
    """(dockerfile, build context, environment, network, cpus) from ``docker-compose.yaml``."""
    if not (root / "docker-compose.yaml").is_file():
        return root / "Dockerfile", root, {}, True, _cpus(root, {})
    services = _yaml(root, "docker-compose.yaml").get("services")
    if not isinstance(services, dict) or len(services) != 1:
        n = len(services) if isinstance(services, dict) else 0
        raise TaskLoadError(
            root, f"docker-compose.yaml: exactly one service is supported, found {n}"
        )
    (service,) = services.values()
    service = service if isinstance(service, dict) else {}
    build = service.get("build", ".")
    build = {"context": build} if isinstance(build, str) else build
    if not isinstance(build, dict):
        raise TaskLoadError(root, "docker-compose.yaml: `build` must be a path or a mapping")
    context = (root / str(build.get("context", "."))).resolve()
    dockerfile = context / str(build.get("dockerfile", "Dockerfile"))
    if not context.is_relative_to(root) or not dockerfile.resolve().is_relative_to(root):
        raise TaskLoadError(root, "docker-compose.yaml: the build leaves the task directory")
    raw = service.get("environment") or {}
    items = raw.items() if isinstance(raw, dict) else (str(e).partition("=")[::2] for e in raw)
    env = {
        str(k): str(v)
        for k, v in items
        if "${" not in str(v) and str(k) != "TEST_DIR"  # TB1 harness variables
    }
    network = str(service.get("network_mode", "")).lower() != "none"
    return dockerfile, context, env, network, _cpus(root, service)


_TMUX_PRELUDE = """#!/bin/bash
# Generated by clawrl from the task's solution.yaml: Terminal-Bench 1's oracle types these
# commands into a tmux session; so does this script.
command -v tmux >/dev/null || { echo "clawrl: solution.yaml needs tmux in the image" >&2; exit 127; }
S=clawrl-oracle-$$
tmux new-session -d -s "$S" -x 160 -y 40 -c "$PWD" bash
"""


def _solution_commands(root: Path) -> list[dict[str, Any]]:
    """The validated entries of ``solution.yaml`` (TB1's ``TerminalCommand`` fields; other
    keys are ignored, as TB1's model does)."""
    try:
        data = yaml.safe_load(read_text(root, "solution.yaml"))
    except yaml.YAMLError as exc:
        raise TaskLoadError(root, f"solution.yaml is not valid YAML: {exc}") from exc
    if not isinstance(data, list) or not data:
        raise TaskLoadError(root, "solution.yaml must be a non-empty list of commands")
    out = []
    for i, item in enumerate(data):
        where = f"solution.yaml[{i}]"
        if not isinstance(item, dict) or not isinstance(item.get("command"), str):
            raise TaskLoadError(root, f"{where}: an entry needs a `command` string")
        entry: dict[str, Any] = {"command": item["command"]}
        for key, default in (("min_timeout_sec", 0.0), ("max_timeout_sec", 180.0)):
            value = item.get(key, default)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise TaskLoadError(root, f"{where}: `{key}` must be a number >= 0")
            entry[key] = float(value)
        for key in ("block", "append_enter"):
            if not isinstance(item.get(key, False), bool):
                raise TaskLoadError(root, f"{where}: `{key}` must be true or false")
            entry[key] = bool(item.get(key, False))
        out.append(entry)
    return out


def solution_yaml_script(commands: list[dict[str, Any]]) -> str:
    """The bash script replaying TB1 ``solution.yaml`` entries in a tmux session (see the
    module docstring)."""
    lines = [_TMUX_PRELUDE]
    for c in commands:
        keys = shlex.quote(c["command"])
        if c["block"]:
            lines.append(f'tmux send-keys -t "$S" {keys} "; tmux wait -S done-$S" Enter')
            lines.append(f'timeout {c["max_timeout_sec"]:g} tmux wait "done-$S"')
        else:
            enter = " Enter" if c["append_enter"] else ""
            lines.append(f'tmux send-keys -t "$S" {keys}{enter}')
            lines.append(f"sleep {c['min_timeout_sec']:g}")
    return "\n".join(lines) + "\n"


def _stage(root: Path) -> Path:
    """A cached directory holding ``tests/`` (the task's tests, ``run-tests.sh`` and any
    missing shared script) and ``solution/solution.sh``; named by a digest of them."""
    tests = root / "tests"
    run_tests = read_text(root, "run-tests.sh")
    files: dict[str, bytes] = {"tests/run-tests.sh": run_tests.encode()}
    if tests.is_dir():
        for path in sorted(tests.rglob("*")):
            if path.is_file() and not path.is_symlink():
                files[f"tests/{path.relative_to(tests).as_posix()}"] = path.read_bytes()
    for name, text in TB1_SHARED_SCRIPTS.items():
        if name in run_tests and f"tests/{name}" not in files:
            files[f"tests/{name}"] = text.encode()
    files.update({f"tests/{rel}": data for rel, data in runner_files().items()})
    if (root / "solution.sh").is_file():
        files["solution/solution.sh"] = (root / "solution.sh").read_bytes()
    elif (root / "solution.yaml").is_file():
        files["solution/solution.sh"] = solution_yaml_script(_solution_commands(root)).encode()
    return stage_files("tb1", _STAGE_VERSION, files, ("tests",))


def load_tb1(root: Path) -> Task:
    """Load the Terminal-Bench 1 task directory ``root`` (see the module docstring).

    Raises:
        TaskLoadError: ``task.yaml``, ``docker-compose.yaml`` or ``solution.yaml`` is
            invalid (a compose file with more than one service included), ``run-tests.sh``
            is missing, or the
            Dockerfile's ``COPY`` sources are not in the build context.
    """
    data = _yaml(root, "task.yaml")
    if not (root / "run-tests.sh").is_file():
        raise TaskLoadError(root, "Terminal-Bench 1 layout: run-tests.sh is missing")
    dockerfile, context, compose_env, network, cpus = _compose(root)
    from_dockerfile = dockerfile_task_fields(root, dockerfile, context)
    from_dockerfile["env"] = {**from_dockerfile["env"], **compose_env}
    timeouts = {
        k: v
        for k, v in {
            "agent_s": _seconds(root, data, "max_agent_timeout_sec"),
            "verifier_s": _seconds(root, data, "max_test_timeout_sec"),
        }.items()
        if v is not None
    }
    staged = _stage(root)
    solution = None
    if (staged / "solution" / "solution.sh").is_file():
        solution = SolutionSpec(
            files_dir=staged / "solution",
            mount_path=SOLUTION_MOUNT,
            command=("bash", f"{SOLUTION_MOUNT}/solution.sh"),
        )
    category, difficulty = data.get("category"), data.get("difficulty")
    metadata = {k: v for k, v in data.items() if k not in ("instruction", "descriptions")}
    return make_task(
        id=root.name,
        instruction=_instruction(root, data),
        category=category,
        difficulty=difficulty,
        layout=Layout.TB1,
        root=root,
        timeouts=Timeouts(**timeouts),
        limits=TaskLimits(cpus=cpus),
        network=network,
        verifier=VerifierSpec(
            files_dir=staged / "tests",
            mount_path=TESTS_MOUNT,
            command=("bash", f"{TESTS_MOUNT}/run-tests.sh"),
            reward_channel="pytest",
            env={"TEST_DIR": TESTS_MOUNT, **runner_env(TESTS_MOUNT, REWARD_MOUNT)},
            trusted_runner=True,
            verify_on_snapshot=True,
        ),
        solution=solution,
        build_context=context,
        metadata=metadata,
        **from_dockerfile,
    )


class TB1Layout(TaskLayout):
    """Terminal-Bench 1: a ``task.yaml``."""

    name = Layout.TB1.value

    def detect(self, path: Path) -> bool:
        return (path / "task.yaml").is_file()

    def load(self, path: Path) -> Task:
        return load_tb1(path)
