"""The harness subpackage as a whole: the registry, the no-op harness, launches that write
only under ``log_dir``, ``clawrl.bench``'s re-exports, and no import cycle among its
modules (an import graph read with ``ast``, and each module imported in a fresh
interpreter)."""

from __future__ import annotations

import ast
import graphlib
import subprocess
import sys
from pathlib import Path

import clawrl.bench
import clawrl.bench.harness as harness_pkg
import pytest
from clawrl.bench import load_builtin_suite
from clawrl.bench.harness import (
    HarnessContext,
    HarnessLaunch,
    NoopHarness,
    OracleHarness,
    ReferenceHarness,
    get_harness,
    harness_names,
)

TASK = next(t for t in load_builtin_suite() if t.id == "csv_to_markdown")
PKG_DIR = Path(harness_pkg.__file__).parent
BENCH_DIR = PKG_DIR.parent


def test_registry() -> None:
    names = harness_names()
    assert {"mini-swe-agent", "noop", "oracle", "reference"} <= set(names)
    assert names == sorted(names)
    assert isinstance(get_harness("reference"), ReferenceHarness)
    assert isinstance(get_harness("noop"), NoopHarness)
    h = OracleHarness()
    assert get_harness(h) is h
    with pytest.raises(ValueError, match=r"known: .*mini-swe-agent.*noop.*oracle.*reference"):
        get_harness("nope")
    for name in names:  # every name builds an adapter registered under that name
        assert get_harness(name).name == name


def test_noop_does_nothing_and_needs_no_model() -> None:
    h = get_harness("noop")
    assert not h.needs_model and h.api is None and h.mounts(TASK) == {}
    launch = h.launch(HarnessContext(task=TASK))
    assert launch == HarnessLaunch(argv=("true",), workdir=TASK.workspace_path)
    assert h.outcome(0, {}, "").ok and not h.outcome(1, {}, "").ok


@pytest.mark.parametrize("name", harness_names())
def test_every_launch_writes_only_under_log_dir(name: str, tmp_path: Path) -> None:
    """A launch's files, logs and ``HOME`` lie under ``ctx.log_dir``, so a launch can be
    played on the host in a temporary folder (``tools/harnesses/capture_requests.py``)."""
    log_dir = str(tmp_path / "h")
    ctx = HarnessContext(task=TASK, api_key="k", openai_base_url="u/v1", log_dir=log_dir)
    launch = get_harness(name).launch(ctx)
    for path in [*launch.files, *launch.log_paths.values()]:
        assert path.startswith(f"{log_dir}/"), path
    if "HOME" in launch.env:
        assert launch.env["HOME"].startswith(f"{log_dir}/")


def test_the_harness_api_is_public_in_its_subpackage_only() -> None:
    """Each harness name is listed once: in ``clawrl.bench.harness``, not again at
    the package root."""
    for name in ("HarnessContext", "get_harness", "harness_names", "scripted_oracle"):
        assert name in harness_pkg.__all__
    assert not set(clawrl.bench.__all__) & set(harness_pkg.__all__)
    for name in harness_pkg.__all__:
        assert getattr(harness_pkg, name) is not None, name


def _module_name(path: Path) -> str:
    rel = path.relative_to(BENCH_DIR.parent.parent).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _top_level_imports(path: Path, known: set[str]) -> set[str]:
    """Modules of ``known`` that ``path`` imports at module level (not under
    ``TYPE_CHECKING``, not inside functions): ``from a import b`` counts ``a`` and, when it is
    a module, ``a.b``."""
    out: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in known}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module in known:
                out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names} & known
    return out


def _graph(root: Path) -> dict[str, set[str]]:
    files = {_module_name(p): p for p in sorted(root.rglob("*.py"))}
    known = set(files)
    return {m: _top_level_imports(p, known) - {m} for m, p in files.items()}


def test_no_import_cycle_in_clawrl_bench() -> None:
    """The import graph of every clawrl.bench module (``harness`` included; module-level
    imports) is acyclic; the harness modules import nothing of clawrl.bench beyond ``errors``,
    ``task`` and ``plugins`` (which imports nothing of it), and none imports the subpackage's ``__init__`` or ``clawrl.bench``'s."""
    graph = _graph(BENCH_DIR)
    graphlib.TopologicalSorter(graph).prepare()  # raises CycleError on a cycle
    sub = {m: deps for m, deps in graph.items() if m.startswith("clawrl.bench.harness.")}
    assert set(sub) >= {
        f"clawrl.bench.harness.{m}"
        for m in ("base", "registry", "reference", "mini_swe_agent", "node", "oracle", "noop")
    }
    outside = {d for deps in sub.values() for d in deps if not d.startswith("clawrl.bench.harness")}
    assert outside <= {"clawrl.bench.errors", "clawrl.bench.task", "clawrl.bench.plugins"}
    assert graph["clawrl.bench.plugins"] == set()
    # the package __init__ imports every module, so a module importing it would be a cycle
    assert all("clawrl.bench.harness" not in deps for deps in sub.values())


def test_each_harness_module_imports_alone_in_a_fresh_interpreter() -> None:
    """Imported first, in a fresh interpreter, each module of the subpackage loads (a cycle
    hidden behind a lazy import or an import order would fail here)."""
    graph = _graph(PKG_DIR)
    order = [m for m in graphlib.TopologicalSorter(graph).static_order() if "harness." in m]
    code = "import importlib, sys; importlib.import_module(sys.argv[1])"
    for module in order:
        proc = subprocess.run(
            [sys.executable, "-c", code, module], capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, (module, proc.stderr[-2000:])
