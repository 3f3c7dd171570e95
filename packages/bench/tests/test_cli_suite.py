"""``bench --suite DIR``: every task of an external suite by default, and the report lists
the tasks that score without work under the noop harness (real podman)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from clawrl.bench.cli import main

FIXTURES = Path(__file__).parent / "fixtures"
pytestmark = pytest.mark.podman


def test_noop_run_lists_tasks_that_score_without_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite = tmp_path / "suite"
    for name in ("greet_a", "greet_b", "free_points"):
        shutil.copytree(FIXTURES / "harbor_greeting", suite / name)
    # a broken verifier: full marks whatever the workspace holds
    (suite / "free_points" / "tests" / "test.sh").write_text(
        "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"
    )
    out = tmp_path / "run"
    rc = main(["--suite", str(suite), "--harness", "noop", "--output-dir", str(out)])
    assert rc == 0
    doc = json.loads((out / "results.json").read_text())
    assert sorted(r["task_id"] for r in doc["rollouts"]) == ["free_points", "greet_a", "greet_b"]
    assert doc["scores_without_work"] == [
        {"task_id": "free_points", "reward": 1.0, "subscores": {}}
    ]
    by = {r["task_id"]: r for r in doc["rollouts"]}
    assert by["greet_a"]["status"] == "ok" and by["greet_a"]["reward"] == 0.0
    printed = capsys.readouterr().out
    assert "score without work" in printed and "free_points" in printed
    assert "Tasks that score without work" in (out / "report.html").read_text()
