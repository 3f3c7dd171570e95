"""tools/harnesses launch harnesses only through clawrl.bench.harness's public API: the
capture tool plays each adapter's own launch on the host (files under a temporary folder),
and — with the harness installed — records a real run of pi against its recording endpoint."""

from __future__ import annotations

import ast
import importlib.util
import json
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest
from clawrl.bench.harness import harness_cache_dir

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / "tools/harnesses"


def _capture_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("capture_requests", TOOLS / "capture_requests.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["capture_requests"] = module
    spec.loader.exec_module(module)
    return module


def test_tools_import_only_public_clawrl_bench_modules() -> None:
    for path in sorted(TOOLS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("clawrl.bench"):
                assert node.module in {"clawrl.bench", "clawrl.bench.harness"}, (path, node.module)
            if isinstance(node, ast.Import):
                for alias in node.names:
                    assert not alias.name.startswith("clawrl.bench."), (path, alias.name)


def test_capture_plays_every_adapter_launch_on_the_host(tmp_path: Path) -> None:
    cap = _capture_module()
    url = "http://127.0.0.1:9"
    for folder, make in cap.HARNESSES:
        harness = make()
        tmp = tmp_path / folder
        tmp.mkdir()
        launch, work = cap.host_launch(harness, url, tmp)
        assert launch.argv[0] == str(harness.binary) and launch.workdir == str(work)
        assert cap.TASK in launch.argv  # the capture task, given on the command line
        for dest in launch.files:
            assert Path(dest).is_file() and Path(dest).is_relative_to(tmp), dest
        env = cap.host_env(tmp, launch)
        assert Path(env["HOME"]).is_relative_to(tmp)
        assert not any(k.startswith("OPENAI") and k != "OPENAI_API_KEY" for k in env)
        text = " ".join([*launch.argv, *launch.env.values()])
        text += " ".join(Path(d).read_text() for d in launch.files)
        assert url in text, folder  # the endpoint: in argv, environment or a config file


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("npm") is None, reason="needs npm to install pi")
def test_capture_records_a_real_pi_run(tmp_path: Path) -> None:
    """pi through the capture tool: it solves hello.txt against the recording endpoint and
    every request is saved (installs pi once into the harness cache if missing)."""
    cap = _capture_module()
    out = tmp_path / "out"
    rc = cap.main(["--only", "pi", "--out", str(out), "--timeout", "240"])
    assert rc == 0
    saved = sorted((out / "pi").glob("*-chat-completions.json"))
    assert len(saved) >= 3  # two tool calls and the final answer
    doc = json.loads(saved[0].read_text())
    assert doc["harness"] == "pi" and doc["headers"]["authorization"] == "<redacted>"
    assert harness_cache_dir().is_dir()
