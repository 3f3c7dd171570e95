"""Tasks from a dataset file (JSON Lines or Parquet, read with Hugging Face ``datasets``):
one built-in task per row, run by ``bench --task FILE`` like a task directory; a bad row or
a missing extra is one line, exit 2."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from clawrl.bench import Layout, TaskLoadError, load_suite, prepare_workspace
from clawrl.bench.cli import main as bench_main

TEST_SH = (
    'if [ "$(cat "$CLAWRL_WORKSPACE/hello.txt" 2>/dev/null)" = hello ]; '
    'then echo 1; else echo 0; fi > "$CLAWRL_REWARD_DIR/reward.txt"\n'
)
HELLO: dict[str, Any] = {
    "id": "ds_hello",
    "instruction": "Create the file hello.txt containing the word hello.",
    "category": "systems",
    "difficulty": "easy",
    "timeouts": {"agent_s": 60, "verifier_s": 30},
    "environment": {"README.md": "start here\n"},
    "tests": {"test.sh": TEST_SH},
    "solution": {"solve.sh": "echo hello > hello.txt\n"},
}
PLAIN: dict[str, Any] = {  # no environment, no timeouts: null in the other formats' rows
    "id": "ds_plain",
    "instruction": "Create hello.txt with hello in it.",
    "category": "content",
    "difficulty": "medium",
    "tests": {"test.sh": TEST_SH},
    "solution": {"solve.sh": "printf 'hello\\n' > hello.txt\n"},
}


def _jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_jsonl_file_is_a_suite_of_builtin_tasks(tmp_path: Path) -> None:
    tasks = load_suite(_jsonl(tmp_path / "data.jsonl", [HELLO, PLAIN]))
    assert [t.id for t in tasks] == ["ds_hello", "ds_plain"]
    hello, plain = tasks
    assert hello.layout is Layout.BUILTIN and hello.category == "systems"
    assert (hello.timeouts.agent_s, plain.timeouts.agent_s) == (60, 600)
    assert hello.verifier.command == ("bash", "/tests/test.sh") and hello.solution is not None
    ws = prepare_workspace(hello, tmp_path / "ws")
    assert (ws / "README.md").read_text() == "start here\n"
    assert plain.workspace_sources == ()


def test_a_parquet_file_with_files_as_lists(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")

    def listed(row: dict[str, Any]) -> dict[str, Any]:
        out = dict(row)
        for key in ("environment", "tests", "solution"):
            files = row.get(key, {})
            out[key] = [{"path": p, "content": c} for p, c in files.items()]
        return out

    path = tmp_path / "data.parquet"
    datasets.Dataset.from_list([listed(HELLO), listed(PLAIN)]).to_parquet(str(path))
    tasks = load_suite(path)
    assert [t.id for t in tasks] == ["ds_hello", "ds_plain"]
    assert prepare_workspace(tasks[0], tmp_path / "ws").joinpath("README.md").is_file()


def test_a_bad_row_is_named(tmp_path: Path) -> None:
    bad = {**PLAIN, "id": "ds_bad", "tests": {"notes.txt": "no verifier"}}
    with pytest.raises(TaskLoadError, match=r"row 1 \('ds_bad'\): no verifier"):
        load_suite(_jsonl(tmp_path / "data.jsonl", [HELLO, bad]))


@pytest.mark.parametrize(
    ("rows", "says"),
    [
        ([HELLO, {**PLAIN, "difficulty": "epic"}], "row 1 ('ds_plain'): task.toml: difficulty"),
        ([HELLO, {**PLAIN, "id": "ds_hello"}], "duplicate task id 'ds_hello'"),
    ],
)
def test_bench_exits_2_with_one_line_for_a_bad_file(
    tmp_path: Path, one_line: Callable[[], str], rows: list[dict[str, Any]], says: str
) -> None:
    path = _jsonl(tmp_path / "data.jsonl", rows)
    assert bench_main(["--task", str(path), "--harness", "oracle", "--list"]) == 2
    line = one_line()
    assert line.startswith(f"bench: {path}: ") and says in line, line


def test_without_the_datasets_library_one_line_names_the_extra(
    tmp_path: Path, one_line: Callable[[], str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # `import datasets` fails
    path = _jsonl(tmp_path / "data.jsonl", [HELLO])
    assert bench_main(["--task", str(path), "--list"]) == 2
    assert "pip install 'clawrl-bench[datasets]'" in one_line()


def test_bench_lists_only_the_files_tasks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _jsonl(tmp_path / "data.jsonl", [HELLO, PLAIN])
    assert bench_main(["--task", str(path), "--list"]) == 0
    out = capsys.readouterr().out
    assert "2 tasks" in out and "ds_hello" in out and "ds_plain" in out


@pytest.mark.podman
def test_bench_runs_a_rows_task_end_to_end(tmp_path: Path) -> None:
    """The oracle solves the row's task in a real sandbox and its test.sh scores it 1; the
    untouched workspace scores 0."""
    path = _jsonl(tmp_path / "data.jsonl", [HELLO, PLAIN])
    out = tmp_path / "out"
    argv = ["--task", str(path), "--task-id", "ds_hello", "--harness", "oracle", "noop"]
    assert bench_main([*argv, "--output-dir", str(out), "--no-html"]) == 0
    rollouts = json.loads((out / "results.json").read_text())["rollouts"]
    got = {(r["task_id"], r["harness"]): (r["status"], r["reward"]) for r in rollouts}
    assert got == {("ds_hello", "oracle"): ("ok", 1.0), ("ds_hello", "noop"): ("ok", 0.0)}, got
