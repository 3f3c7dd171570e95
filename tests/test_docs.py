"""The docs stay short, self-contained and runnable: README sizes, no references to files
outside the repository, the run records' size, and the README's smoke test command."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
READMES = [ROOT / "README.md", *sorted((ROOT / "packages").glob("*/README.md"))]
#: Design notes that live outside the repository; docs must say what users need themselves.
OUTSIDE = re.compile(
    r"DESIGN\.md|REFERENCE\.md|HARNESSES\.md|ENVIRONMENT\.md|STYLE\.md|\.\./shared/"
)
#: Engineering-log language: "session 7", "issue 21".
LOG = re.compile(r"\b(?:[Ss]ession|[Ii]ssue) \d+\b")


def _markdown_files() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [ROOT / p for p in out if not p.startswith("docs/runs/")]


@pytest.mark.parametrize("readme", READMES, ids=lambda p: str(p.relative_to(ROOT)))
def test_readme_is_at_most_300_lines(readme: Path) -> None:
    assert len(readme.read_text().splitlines()) <= 300


def test_docs_refer_to_nothing_outside_the_repository() -> None:
    bad = [
        f"{path.relative_to(ROOT)}:{i}: {line.strip()}"
        for path in _markdown_files()
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if OUTSIDE.search(line) or LOG.search(line)
    ]
    assert not bad, "\n".join(bad)


def test_code_and_tests_use_no_tracker_language() -> None:
    """Docstrings and comments say what the code does, not which tracker entry asked for it."""
    out = subprocess.run(
        ["git", "ls-files", "*.py", "*.sh", "*.toml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    bad = [
        f"{p}:{i}: {line.strip()}"
        for p in out
        if p != "tests/test_docs.py" and (ROOT / p).is_file()
        for i, line in enumerate((ROOT / p).read_text(errors="replace").splitlines(), 1)
        if LOG.search(line)
    ]
    assert not bad, "\n".join(bad)


def test_run_records_stay_small() -> None:
    runs = ROOT / "docs" / "runs"
    total = sum(p.stat().st_size for p in runs.rglob("*") if p.is_file())
    assert total <= 2_000_000, f"docs/runs holds {total:,} bytes"
    for run in runs.iterdir():
        if run.is_dir():
            size = sum(p.stat().st_size for p in run.rglob("*") if p.is_file())
            assert size <= 200_000, f"{run.name}: {size:,} bytes"


def test_readme_smoke_test_selects_its_tasks(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's first bench command names real tasks and valid flags (run with --list,
    which selects the tasks and stops before any sandbox)."""
    from clawrl.bench.cli import main

    text = (ROOT / "README.md").read_text()
    section = text.split("## One-minute smoke test", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "the smoke test section has no bash block"
    bench = [line for line in block.group(1).splitlines() if line.startswith("uv run bench ")]
    assert bench and "view" in bench[-1], "the smoke test runs bench, then the viewer"
    argv = shlex.split(bench[0])[3:]
    assert main([*argv, "--list"]) == 0
    listed = capsys.readouterr().out
    ids = argv[argv.index("--task-id") + 1 : argv.index("--output-dir")]
    assert ids and all(task_id in listed for task_id in ids)
