"""The guide's own harness (docs/bring-your-own.md, examples/my-harness): a shell-script
agent in real podman sandboxes behind the real proxy, named by import path (Python API and
``bench`` from its folder) and, installed as a package, by its entry point in ``bench`` and
in ``train``."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.podman]

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "my-harness"
BIN = Path(sys.executable).parent


def _run(argv: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv,
        cwd=cwd,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _rollouts(out: Path) -> list[dict[str, Any]]:
    rollouts: list[dict[str, Any]] = json.loads((out / "results.json").read_text())["rollouts"]
    return rollouts


def _bench(cwd: Path, harness: str, out: Path, **env: str) -> list[dict[str, Any]]:
    argv = [str(BIN / "bench"), "--model", "scripted", "--harness", harness]
    argv += ["--task-id", "csv_to_markdown", "--samples", "1", "--k", "1"]
    r = _run([*argv, "--output-dir", str(out), "--no-html"], cwd, **env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return _rollouts(out)


def test_the_guides_harness_solves_a_task_through_the_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Scripted to answer with the task's solution as one ``bash`` call, the shell agent
    runs it in the sandbox and the verifier gives it full marks: two model calls."""
    from clawrl.bench import load_builtin_suite, run_rollouts
    from clawrl.bench.harness import oracle_shell_command
    from clawrl.proxy import build_default_model, format_assistant_text
    from clawrl.proxy.testing import ScriptedBackend

    monkeypatch.setattr(sys, "path", [str(EXAMPLE), *sys.path])
    task = next(t for t in load_builtin_suite() if t.id == "csv_to_markdown")
    model_dir = build_default_model("byte")
    backend = ScriptedBackend.from_model_dir(model_dir)

    async def script(session: Any, spec: Any) -> None:
        solve = [("bash", {"command": oracle_shell_command(spec.task)})]
        backend.script(
            session.session_id,
            [format_assistant_text(tool_calls=solve), format_assistant_text(content="Done.")],
        )

    (r,) = asyncio.run(
        run_rollouts(
            [task],
            ["my_harness:ShellAgent"],
            backend=backend,
            model_dir=model_dir,
            session_hook=script,
        )
    )
    assert (r.harness, r.status.value, r.reward, r.n_calls) == ("shell-agent", "ok", 1.0, 2)


def test_bench_runs_it_by_import_path_from_its_folder(tmp_path: Path) -> None:
    (r,) = _bench(EXAMPLE, "my_harness:ShellAgent", tmp_path / "out")
    # the scripted backend's default answer has no tool call: one call, then the agent ends
    assert (r["harness"], r["status"], r["n_calls"]) == ("shell-agent", "ok", 1)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example installed as a package (``uv pip install --target``): its entry point in
    the group ``clawrl.harnesses`` is the only way to find it."""
    site = tmp_path_factory.mktemp("site")
    uv = shutil.which("uv")
    assert uv, "uv is needed to install the example package"
    r = _run([uv, "pip", "install", "--quiet", "--target", str(site), str(EXAMPLE)], ROOT)
    assert r.returncode == 0, r.stderr
    assert (site / "my_harness" / "agent.sh").is_file()
    return site


def test_bench_runs_it_by_entry_point(installed: Path, tmp_path: Path) -> None:
    (r,) = _bench(tmp_path, "shell-agent", tmp_path / "out", PYTHONPATH=str(installed))
    assert (r["harness"], r["status"], r["n_calls"]) == ("shell-agent", "ok", 1)


def test_train_runs_it_by_entry_point(installed: Path, tmp_path: Path) -> None:
    """The example's train.toml, shortened to one GRPO step of the tiny model (embedded
    backend), the harness named by its entry point."""
    out = tmp_path / "run"
    sets = [
        f"run.out='{out}'",
        "run.steps=1",
        "tasks.train_n=2",
        "tasks.heldout_n=1",
        "tasks.tasks_per_step=1",
        "rollout.samples=2",
        "rollout.max_turns=1",
        "rollout.max_tokens=16",
        "rollout.harnesses=['shell-agent']",
        "logging.progress=false",
    ]
    argv = [str(BIN / "train"), "--config", str(EXAMPLE / "train.toml")]
    argv += [arg for s in sets for arg in ("--set", s)]
    r = _run(argv, tmp_path, PYTHONPATH=str(installed))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows if row.get("kind") == "train"] == [1], rows
    runs = (out / "runs.jsonl").read_text().splitlines()
    (run_id,) = [json.loads(line)["run_id"] for line in runs]
    captures = (out / "capture" / run_id).glob("*.jsonl")
    records = [line for f in captures for line in f.read_text().splitlines()]
    assert len(records) >= 2  # each of the 2 rollouts called the model through the proxy
