"""A task's oracle as model turns: tool calls in the reference harness's schema.

For the proxy's ScriptedBackend (a test backend): scripted on a session, these completions
make the reference harness reproduce the oracle through the model boundary — for harness
tests, oracle trajectories and cold-start data.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from clawrl.bench.task import Task
from clawrl.proxy import format_assistant_text

__all__ = ["ORACLE_COPY_DIR", "oracle_completions"]

#: Where the scripted turns write the solution files inside the agent's sandbox.
ORACLE_COPY_DIR = "/tmp/clawrl-oracle"


def oracle_completions(task: Task, final_text: str = "Done.") -> list[str]:
    """Assistant turns (model-format text) that solve ``task`` with the reference harness.

    Turn 1: one ``write_file`` call per text file of the solution directory, written under
    :data:`ORACLE_COPY_DIR`; turn 2: one ``bash`` call running the solution command with
    the solution mount path replaced by that directory, in the workspace; turn 3: a final
    answer without tool calls.

    Raises:
        ValueError: the task has no solution, or a solution file is not UTF-8 text.
    """
    if task.solution is None:
        raise ValueError(f"task {task.id!r} has no solution")
    sol = task.solution
    writes: list[tuple[str, dict[str, object]]] = []
    for path in sorted(sol.files_dir.rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(sol.files_dir).as_posix()
        try:
            content = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"solution file {path} is not UTF-8 text") from None
        writes.append(("write_file", {"path": f"{ORACLE_COPY_DIR}/{rel}", "content": content}))
    mount = str(PurePosixPath(sol.mount_path))
    argv = [a.replace(mount, ORACLE_COPY_DIR) for a in sol.command]
    command = "cd " + _quote(task.workspace_path) + " && " + " ".join(_quote(a) for a in argv)
    turns = []
    if writes:
        turns.append(format_assistant_text(tool_calls=writes))
    turns.append(format_assistant_text(tool_calls=[("bash", {"command": command})]))
    turns.append(format_assistant_text(content=final_text))
    return turns


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)
