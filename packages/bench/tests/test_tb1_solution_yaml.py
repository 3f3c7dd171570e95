"""Terminal-Bench 1's solution.yaml (terminal commands typed into tmux) as the oracle of a
task without solution.sh."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
from clawrl.bench import RolloutStatus, TaskLoadError, load_task, run_rollouts
from clawrl.bench.tasks.tb1 import solution_yaml_script

FIXTURE = Path(__file__).parent / "fixtures" / "tb1_solution_yaml"


def test_solution_yaml_becomes_the_oracle_script() -> None:
    task = load_task(FIXTURE)
    assert task.solution is not None and task.solution.command[-1] == "/solution/solution.sh"
    script = (task.solution.files_dir / "solution.sh").read_text()
    assert script.startswith("#!/bin/bash") and "tmux new-session -d" in script
    assert 'tmux send-keys -t "$S" C-c\nsleep 0.3' in script  # a key name, no Enter
    assert "'echo typed > /app/typed.txt'\nsleep 0" in script  # typed, not run
    assert 'timeout 60 tmux wait "done-$S"' in script  # block: waits up to max_timeout_sec


def test_defaults_are_tb1s() -> None:
    script = solution_yaml_script(
        [{"command": "ls", "min_timeout_sec": 0.0, "max_timeout_sec": 180.0,
          "block": False, "append_enter": False}]
    )  # fmt: skip
    assert script.rstrip().endswith('tmux send-keys -t "$S" ls\nsleep 0')


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("- command: [ls]\n", r"solution.yaml\[0\].*command"),
        ("- command: ls\n  block: maybe\n", "block"),
        ("- command: ls\n  min_timeout_sec: -1\n", "min_timeout_sec"),
        ("command: ls\n", "non-empty list"),
        ("- [\n", "not valid YAML"),
    ],
)
def test_bad_solution_yaml_is_a_load_error(tmp_path: Path, text: str, needle: str) -> None:
    root = tmp_path / "task"
    shutil.copytree(FIXTURE, root)
    (root / "solution.yaml").write_text(text)
    with pytest.raises(TaskLoadError, match=needle):
        load_task(root)


def test_solution_sh_wins(tmp_path: Path) -> None:
    root = tmp_path / "task"
    shutil.copytree(FIXTURE, root)
    (root / "solution.sh").write_text("#!/bin/bash\necho mine\n")
    task = load_task(root)
    assert task.solution is not None
    assert (task.solution.files_dir / "solution.sh").read_text() == "#!/bin/bash\necho mine\n"


@pytest.mark.podman
@pytest.mark.slow
def test_solution_yaml_oracle_passes() -> None:
    """Replayed in tmux in the task image: the heredoc, C-c interrupting a sleep, a line
    typed without Enter and cleared with C-u, and block commands waited for."""
    (result,) = asyncio.run(run_rollouts([load_task(FIXTURE)], ["oracle"]))
    assert result.status is RolloutStatus.OK and result.reward == 1.0, result
    assert result.subscores == {
        "test_count": 1.0,
        "test_block_waited": 1.0,
        "test_key_names_interrupt": 1.0,
        "test_no_enter_no_run": 1.0,
    }
