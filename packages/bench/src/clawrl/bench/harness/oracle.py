"""The task's oracle as a harness (no model), and as model turns for scripted sessions.

:class:`OracleHarness` runs ``solution/solve.sh`` itself. For the proxy's ScriptedBackend (a
test backend), :func:`oracle_completions` gives the turns that make the *reference harness*
reproduce the oracle through the model boundary, and :func:`oracle_shell_command` the one
shell command that the npm harnesses' shell tools run
(:func:`~clawrl.bench.harness.scripted_oracle`) — for harness tests, oracle trajectories
and cold-start data. Both copy the solution files to :data:`ORACLE_COPY_DIR` and run the
solution command there, in the workspace.
"""

from __future__ import annotations

import base64
import shlex
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath

from clawrl.bench.harness.base import (
    HarnessAdapter,
    HarnessContext,
    HarnessLaunch,
    HarnessOutcome,
    WireAPI,
    exit_code_outcome,
)
from clawrl.bench.task import SolutionSpec, Task
from clawrl.proxy import format_assistant_text

__all__ = ["ORACLE_COPY_DIR", "OracleHarness", "oracle_completions", "oracle_shell_command"]

#: Where the scripted turns write the solution files inside the agent's sandbox.
ORACLE_COPY_DIR = "/tmp/clawrl-oracle"
#: The oracle's exit status for a task without a solution.
_NO_SOLUTION = 65


class OracleHarness(HarnessAdapter):
    """Runs the task's oracle (``solution/solve.sh``) as the agent; no model, no session.

    The solution files are mounted read-only at ``task.solution.mount_path`` (``/solution``)
    in *this* rollout's sandbox only. A task without a solution cannot run (the runner
    reports ``harness-error``). Exit 0 = ok.
    """

    name = "oracle"
    api: WireAPI | None = None
    needs_model = False

    def mounts(self, task: Task) -> dict[str, str]:
        if task.solution is None:
            return {}
        return {str(task.solution.files_dir.resolve()): task.solution.mount_path}

    def launch(self, ctx: HarnessContext) -> HarnessLaunch:
        task = ctx.task
        if task.solution is None:
            return HarnessLaunch(
                argv=("sh", "-c", f"echo 'task has no solution' >&2; exit {_NO_SOLUTION}"),
                workdir=task.workspace_path,
            )
        return HarnessLaunch(
            argv=tuple(task.solution.command),
            env={"CLAWRL_WORKSPACE": task.workspace_path, **task.env},
            workdir=task.workspace_path,
        )

    def outcome(self, exit_code: int, logs: Mapping[str, str], stdout: str) -> HarnessOutcome:
        if exit_code == _NO_SOLUTION:
            return HarnessOutcome(ok=False, end_reason="no_solution", reason="task has no solution")
        return exit_code_outcome(exit_code, "solved", "solve.sh")


def _solution(task: Task) -> SolutionSpec:
    if task.solution is None:
        raise ValueError(f"task {task.id!r} has no solution")
    return task.solution


def _solution_files(sol: SolutionSpec) -> Iterator[tuple[str, Path]]:
    """(relative posix path, host path) of every file of the solution, sorted."""
    for path in sorted(sol.files_dir.rglob("*")):
        if path.is_file():
            yield path.relative_to(sol.files_dir).as_posix(), path


def _solve_command(task: Task, copy_dir: str) -> str:
    """``cd <workspace> && <solution command>``, the mount path replaced by ``copy_dir``."""
    sol = _solution(task)
    mount = str(PurePosixPath(sol.mount_path))
    argv = [a.replace(mount, copy_dir) for a in sol.command]
    return f"cd {shlex.quote(task.workspace_path)} && " + " ".join(shlex.quote(a) for a in argv)


def oracle_completions(task: Task, final_text: str = "Done.") -> list[str]:
    """Assistant turns (model-format text) that solve ``task`` with the reference harness.

    Turn 1: one ``write_file`` call per text file of the solution directory, written under
    :data:`ORACLE_COPY_DIR`; turn 2: one ``bash`` call running the solution command with
    the solution mount path replaced by that directory, in the workspace; turn 3: a final
    answer without tool calls.

    Raises:
        ValueError: the task has no solution, or a solution file is not UTF-8 text.
    """
    writes: list[tuple[str, dict[str, object]]] = []
    for rel, path in _solution_files(_solution(task)):
        try:
            content = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"solution file {path} is not UTF-8 text") from None
        writes.append(("write_file", {"path": f"{ORACLE_COPY_DIR}/{rel}", "content": content}))
    command = _solve_command(task, ORACLE_COPY_DIR)
    turns = []
    if writes:
        turns.append(format_assistant_text(tool_calls=writes))
    turns.append(format_assistant_text(tool_calls=[("bash", {"command": command})]))
    turns.append(format_assistant_text(content=final_text))
    return turns


def oracle_shell_command(task: Task, copy_dir: str = ORACLE_COPY_DIR) -> str:
    """One shell command that solves ``task``: writes the solution files (base64, so any
    content survives quoting) under ``copy_dir`` and runs the solution command there, in the
    workspace.

    Raises:
        ValueError: the task has no solution.
    """
    parts = [f"mkdir -p {shlex.quote(copy_dir)}"]
    for rel, path in _solution_files(_solution(task)):
        dest = f"{copy_dir}/{rel}"
        b64 = base64.b64encode(path.read_bytes()).decode()
        parts.append(
            f"mkdir -p {shlex.quote(str(PurePosixPath(dest).parent))} && "
            f"echo {b64} | base64 -d > {shlex.quote(dest)}"
        )
    parts.append(_solve_command(task, copy_dir))
    return " && ".join(parts)
