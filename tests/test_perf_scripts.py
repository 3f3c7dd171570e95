"""The benchmark scripts under tools/perf/ keep running (their figures are not asserted:
performance is measured in benchmarks, not timed tests)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_prefixtree_benchmark_runs_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "prefixtree.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools/perf/bench_prefixtree.py"),
            "--repeat",
            "2",
            "--group",
            "2",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    text = json.dumps(result)
    assert "compression" in text
