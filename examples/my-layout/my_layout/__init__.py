"""A task layout in one file: a task is a folder with ``task.json`` (``id``, ``instruction``),
``check.sh`` (exits 0 when the task is solved) and, optionally, ``solve.sh`` (the oracle)
and ``workspace/`` (the agent's starting files)."""

from __future__ import annotations

import json
from pathlib import Path

from clawrl.bench import SolutionSpec, Task, TaskLoadError, VerifierSpec, WorkspaceSource
from clawrl.bench.tasks import TaskLayout, make_task, read_text

CHECK = "if bash /tests/check.sh; then echo 1; else echo 0; fi > /logs/verifier/reward.txt"


class CheckScriptLayout(TaskLayout):
    name = "check-script"

    def detect(self, path: Path) -> bool:
        return (path / "task.json").is_file() and (path / "check.sh").is_file()

    def load(self, path: Path) -> Task:
        try:
            data = json.loads(read_text(path, "task.json"))
        except json.JSONDecodeError as exc:
            raise TaskLoadError(path, f"task.json is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise TaskLoadError(path, "task.json must hold an object")
        workspace = path / "workspace"
        return make_task(
            layout=self.name,
            root=path,
            id=str(data.get("id") or path.name),
            instruction=str(data.get("instruction", "")),
            verifier=VerifierSpec(files_dir=path, command=("bash", "-c", CHECK)),
            solution=(
                SolutionSpec(files_dir=path, command=("bash", "/solution/solve.sh"))
                if (path / "solve.sh").is_file()
                else None
            ),
            workspace_sources=(WorkspaceSource(src=workspace),) if workspace.is_dir() else (),
        )
