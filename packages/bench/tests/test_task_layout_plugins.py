"""Task layouts brought by the user (the guide's one-file layout, examples/my-layout): found
through an entry point of the group ``clawrl.task_layouts`` of an installed distribution or
named by import path, loaded and run by ``bench`` end to end; an unknown layout is one
line, exit 2. And the shape that makes it possible: the runner and the verifier import no
layout module, and a ``Task`` is built in one place."""

from __future__ import annotations

import ast
import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from clawrl.bench import Layout, TaskLoadError, detect_layout, load_suite, load_task
from clawrl.bench.cli import main as bench_main
from clawrl.bench.tasks import (
    TASK_LAYOUT_ENTRY_POINT_GROUP,
    UnknownLayoutError,
    get_layout,
    layout_names,
    register_layout,
)

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "my-layout"
TASK = EXAMPLE / "tasks" / "hello_file"
SRC = ROOT / "packages" / "bench" / "src" / "clawrl" / "bench"
LAYOUT_MODULES = ("builtin", "harbor", "tb1", "clawgym", "agentbench_os", "learnable")


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The example as an installed distribution on ``sys.path`` (its ``.dist-info`` as an
    installer writes it, with the entry point of its pyproject.toml): the entry point is
    the only way to find the layout."""
    site = tmp_path / "site"
    (site / "my_layout").mkdir(parents=True)
    (site / "my_layout" / "__init__.py").write_text((EXAMPLE / "my_layout/__init__.py").read_text())
    info = site / "my_layout-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-layout\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(
        f"[{TASK_LAYOUT_ENTRY_POINT_GROUP}]\ncheck-script = my_layout:CheckScriptLayout\n"
    )
    monkeypatch.delitem(sys.modules, "my_layout", raising=False)
    monkeypatch.setattr(sys, "path", [str(site), *sys.path])
    return site


def test_an_entry_point_layout_is_detected_and_loaded(installed: Path) -> None:
    assert {"check-script", "builtin", "harbor", "agentbench-os"} <= set(layout_names())
    assert detect_layout(TASK) == "check-script"
    task = load_task(TASK)
    assert (task.id, task.layout, task.solution is not None) == ("hello_file", "check-script", True)
    assert [t.id for t in load_suite(EXAMPLE / "tasks")] == ["hello_file"]


def test_a_broken_entry_point_is_one_error_naming_it(installed: Path) -> None:
    info = installed / "my_layout-0.1.0.dist-info" / "entry_points.txt"
    info.write_text(f"[{TASK_LAYOUT_ENTRY_POINT_GROUP}]\nbroken = my_layout:Missing\n")
    with pytest.raises(UnknownLayoutError, match=r"task layout 'broken': loading entry point"):
        get_layout("broken")


def test_without_the_plugin_the_task_is_not_recognised() -> None:
    with pytest.raises(TaskLoadError, match=r"no task\.toml"):
        load_task(TASK)


def test_a_layout_by_import_path_and_by_registration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", [str(EXAMPLE), *sys.path])
    monkeypatch.delitem(sys.modules, "my_layout", raising=False)
    task = load_task(TASK, "my_layout:CheckScriptLayout")
    assert task.layout == "my_layout:CheckScriptLayout"
    from my_layout import CheckScriptLayout  # type: ignore[import-not-found]

    register_layout("mine", CheckScriptLayout)
    try:
        assert load_task(TASK, "mine").layout == "mine"
        with pytest.raises(ValueError, match="already registered"):
            register_layout("mine", CheckScriptLayout)
    finally:
        from clawrl.bench.tasks import registry

        registry._REGISTRY.pop("mine", None)
        registry._MADE.pop("mine", None)


def test_bench_lists_it_and_names_it_by_layout(
    installed: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert bench_main(["--task", str(TASK), "--layout", "check-script", "--list"]) == 0
    assert "check-script" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("layout", "says"),
    [
        ("no-such-layout", "bench: unknown task layout 'no-such-layout'; known: "),
        ("no_such_mod:Layout", "bench: task layout 'no_such_mod:Layout': cannot import"),
    ],
)
def test_an_unknown_layout_exits_2_with_one_line(
    layout: str, says: str, one_line: Callable[[], str]
) -> None:
    assert bench_main(["--task", str(TASK), "--layout", layout, "--list"]) == 2
    assert one_line().startswith(says)


@pytest.mark.podman
def test_bench_runs_an_entry_point_layouts_task_end_to_end(installed: Path, tmp_path: Path) -> None:
    """The oracle solves the plug-in's task in a real sandbox and its check scores it 1; the
    untouched workspace scores 0."""
    out = tmp_path / "out"
    argv = ["--task", str(TASK), "--harness", "oracle", "noop", "--output-dir", str(out)]
    assert bench_main([*argv, "--no-html"]) == 0
    rollouts = json.loads((out / "results.json").read_text())["rollouts"]
    got = {r["harness"]: (r["status"], r["reward"]) for r in rollouts}
    assert got == {"oracle": ("ok", 1.0), "noop": ("ok", 0.0)}, rollouts


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
    return names


def test_the_runner_and_the_verifier_import_no_layout_module() -> None:
    layouts = {f"clawrl.bench.tasks.{m}" for m in LAYOUT_MODULES}
    for name in ("runner.py", "runner_helpers.py", "verify.py"):
        assert not _imports(SRC / name) & layouts, name


def test_a_task_is_built_in_one_place() -> None:
    """``Task(...)`` is called once in clawrl.bench's sources: in ``make_task``."""
    calls = [
        f"{path.relative_to(SRC)}:{node.lineno}"
        for path in sorted(SRC.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Task"
    ]
    assert len(calls) == 1 and calls[0].startswith("tasks/base.py"), calls


def test_builtin_layouts_keep_their_enum() -> None:
    task = load_task(ROOT / "packages/bench/tests/fixtures/harbor_greeting")
    assert task.layout is Layout.HARBOR
