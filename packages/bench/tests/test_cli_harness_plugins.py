"""``bench --harness`` takes an import path ``module:Class`` from the current folder; a bad
one exits 2 with one line naming the harness."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from clawrl.bench.cli import main as bench_main

HARNESS = """
from clawrl.bench.harness import HarnessAdapter, HarnessLaunch


class Mine(HarnessAdapter):
    name = "mine"
    needs_model = False

    def launch(self, ctx):
        return HarnessLaunch(argv=("true",))
"""


def test_bench_accepts_an_import_path_from_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "bench_byo_harness.py").write_text(HARNESS)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "bench_byo_harness", raising=False)
    assert (
        bench_main(["--harness", "bench_byo_harness:Mine", "--task-id", "fix_median", "--list"])
        == 0
    )


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("no_such_mod:Agent", "harness 'no_such_mod:Agent': cannot import no_such_mod"),
        ("refrence", "unknown harness 'refrence'"),
    ],
)
def test_a_bad_harness_exits_2(name: str, says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_main(["--harness", name, "--list"]) == 2
    printed = capsys.readouterr()
    text = " ".join((printed.out + printed.err).split())  # rich may wrap long lines
    assert text.startswith(f"bench: {says}")
