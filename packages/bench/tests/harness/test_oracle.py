"""The oracle harness and the oracle as scripted model turns (reference harness: tool calls;
npm harnesses: one shell command, run here for real with bash)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from clawrl.bench.harness import (
    OracleHarness,
    oracle_completions,
    oracle_shell_command,
)
from clawrl.proxy import parse_completion

from .conftest import TASK
from .conftest import make_context as _ctx


def test_oracle_mounts_the_solution_and_needs_no_model() -> None:
    h = OracleHarness()
    assert not h.needs_model and h.api is None
    assert TASK.solution is not None
    assert h.mounts(TASK) == {str(TASK.solution.files_dir.resolve()): "/solution"}
    assert h.launch(_ctx()).argv == tuple(TASK.solution.command)
    assert h.outcome(0, {}, "").ok and not h.outcome(1, {}, "").ok


def test_oracle_completions_are_well_formed_tool_calls() -> None:
    turns = oracle_completions(TASK)
    assert len(turns) == 3
    parsed = [parse_completion(t, finish_reason="stop") for t in turns]
    assert [tc.name for tc in parsed[0].tool_calls] == ["write_file"]
    assert parsed[0].tool_calls[0].arguments["path"] == "/tmp/clawrl-oracle/solve.sh"
    assert [tc.name for tc in parsed[1].tool_calls] == ["bash"]
    assert parsed[1].tool_calls[0].arguments["command"] == (
        "cd /workspace && bash /tmp/clawrl-oracle/solve.sh"
    )
    assert not parsed[2].tool_calls and parsed[2].content == "Done."


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_oracle_shell_command_solves_the_task(tmp_path: Path) -> None:
    task = TASK
    ws = tmp_path / "ws"
    shutil.copytree(task.workspace_sources[0].src, ws)
    local = task.model_copy(update={"workspace_path": str(ws)})
    cmd = oracle_shell_command(local, copy_dir=str(tmp_path / "oracle"))
    subprocess.run(["bash", "-c", cmd], check=True, capture_output=True)
    table = (ws / "output/products.md").read_text()
    assert "|---" in table.replace(" ", "") and "$" in table
