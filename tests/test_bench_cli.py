"""The `bench` command end to end (podman + proxy), on reduced slices to keep CI short."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.podman

BENCH = str(Path(sys.executable).parent / "bench")


def _bench(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([BENCH, *args], capture_output=True, text=True, timeout=timeout)


def test_no_arguments_selects_the_default_slice() -> None:
    proc = _bench("--list")
    assert proc.returncode == 0, proc.stderr
    assert "6 tasks" in proc.stdout
    for category in ("productivity", "systems", "analysis", "content", "planning", "software"):
        assert category in proc.stdout


@pytest.mark.slow
def test_default_run_on_a_reduced_slice(tmp_path: Path) -> None:
    """`bench` with its defaults (embedded tiny model, reference harness + oracle), one task."""
    out = tmp_path / "run"
    proc = _bench("--task-id", "csv_to_markdown", "--max-tokens", "16", "--output-dir", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "per harness" in proc.stdout and "pass@1" in proc.stdout
    doc = json.loads((out / "results.json").read_text())
    by = {r["harness"]: r for r in doc["rollouts"]}
    assert set(by) == {"reference", "oracle"}
    assert by["oracle"]["reward"] == 1.0 and by["oracle"]["status"] == "ok"
    assert by["reference"]["status"] != "infra-error" and by["reference"]["n_calls"] >= 1
    assert doc["summary"]["by_harness"]["oracle"]["mean_score"] == 1.0
    config = json.loads((out / "config.json").read_text())
    assert config["model"] == "embedded" and config["max_tokens"] == 16
    html = (out / "report.html").read_text()
    assert "csv_to_markdown" in html and "prefix tree" in html and "unique" in html


def test_scripted_model_with_a_config_file(tmp_path: Path) -> None:
    """TOML config + command-line override; the scripted model feeds the reference harness
    each task's oracle as tool calls, so both harnesses score 1."""
    cfg = tmp_path / "bench.toml"
    cfg.write_text(
        'task_ids = ["fix_median", "sales_summary"]\nmodel = "scripted"\nconcurrency = 1\n'
        'ks = [1]\nharnesses = ["reference"]\n'
    )
    out = tmp_path / "run"
    proc = _bench(
        "--config",
        str(cfg),
        "--concurrency",
        "4",
        "--harness",
        "reference",
        "oracle",
        "--output-dir",
        str(out),
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((out / "results.json").read_text())
    assert doc["config"]["concurrency"] == 4 and doc["config"]["model"] == "scripted"
    assert len(doc["rollouts"]) == 4
    for r in doc["rollouts"]:
        assert r["status"] == "ok" and r["reward"] == 1.0, (r["task_id"], r["harness"], r["reason"])
    assert doc["summary"]["by_harness"]["reference"]["pass_at_k"]["1"] == 1.0
    # two tasks, both always pass: the task-clustered standard error is 0, printed beside pass@1
    assert doc["summary"]["by_harness"]["reference"]["pass_at_k_stderr"]["1"] == 0.0
    assert "±" in proc.stdout  # (rich wraps the cell in a narrow terminal)


def test_bad_configuration_exits_2(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.toml"
    cfg.write_text("samples = 0\nunknown_key = 1\n")
    proc = _bench("--config", str(cfg))
    assert proc.returncode == 2
    assert "samples" in proc.stderr and "unknown_key" in proc.stderr
    assert _bench("--harness", "nope", "--list").returncode == 2
    assert _bench("--task-id", "no_such_task", "--list").returncode == 2
