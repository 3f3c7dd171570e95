"""The mini-swe-agent adapter and the install-once machinery (a stand-in ``uv``; no
network, no podman)."""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from pathlib import Path

import pytest
from clawrl.bench.harness import (
    HarnessInstallError,
    MiniSweAgentHarness,
    run_streamed,
)

from .conftest import TASK
from .conftest import make_context as _ctx


def test_mini_swe_agent_launch_and_outcomes(tmp_path: Path) -> None:
    h = MiniSweAgentHarness(cache_dir=tmp_path)
    assert not h.installed()
    venv = str(tmp_path / f"mini-swe-agent-{h.version}" / "venv")
    assert h.mounts(TASK) == {venv: venv}  # same path inside: its scripts hold absolute paths
    launch = h.launch(_ctx())
    argv = list(launch.argv)
    assert argv[0] == f"{venv}/bin/mini"
    assert "agent.step_limit=5" in argv and "model.model_kwargs.max_tokens=77" in argv
    assert "model.model_kwargs.api_base=http://127.0.0.1:8000/s/s1/v1" in argv
    assert launch.env["OPENAI_API_KEY"] == "key-1"
    # litellm's request limit is the rollout's plus a minute (a slow backend's long prefill)
    assert f"model.model_kwargs.timeout={int(_ctx().timeout_s) + 60}" in argv

    def traj(status: str) -> dict[str, str]:
        messages = [{"role": "system"}, {"role": "assistant"}, {"role": "assistant"}]
        return {"trajectory": json.dumps({"info": {"exit_status": status}, "messages": messages})}

    for status, end in [
        ("Submitted", "submitted"),
        ("LimitsExceeded", "turn_limit"),
        ("RepeatedFormatError", "repeated_format_error"),
    ]:
        o = h.outcome(0, traj(status), "")
        assert o.ok and o.end_reason == end and o.turns == 2
    bad = h.outcome(1, traj("APIConnectionError"), "")
    assert not bad.ok and bad.end_reason == "apiconnectionerror"
    assert not h.outcome(1, {}, "").ok


def _fake_uv(tmp_path: Path, pip_rc: int = 0) -> Path:
    """A `uv` on PATH that fakes `uv venv DIR` (DIR/bin/mini) and `uv pip install`."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    uv = bin_dir / "uv"
    uv.write_text(
        "#!/bin/sh\n"
        'echo "fake uv $*"\n'
        'if [ "$1" = venv ]; then for a; do d="$a"; done; mkdir -p "$d/bin"; : > "$d/bin/mini"; fi\n'
        f'if [ "$1" = pip ]; then echo "pip failed" >&2; exit {pip_rc}; fi\n'
    )
    uv.chmod(0o755)
    return bin_dir


def test_mini_swe_agent_first_install_closes_its_pipes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first-use install (an empty cache) under filterwarnings=error: every installer
    pipe is closed (an unclosed pipe was a ResourceWarning that failed the e2e
    test on a fresh machine only); progress lines are reported; a second prepare is a no-op."""
    monkeypatch.setenv("PATH", f"{_fake_uv(tmp_path)}{os.pathsep}{os.environ['PATH']}")
    h = MiniSweAgentHarness(python=sys.executable, cache_dir=tmp_path / "cache")
    lines: list[str] = []
    h.prepare(lines.append)
    gc.collect()  # an unclosed pipe left for the collector warns here at the latest
    assert h.installed() and (h.prefix / "bin" / "mini").is_symlink()
    assert any(x.startswith("fake uv venv") for x in lines)
    assert any(x.startswith("fake uv pip install mini-swe-agent==") for x in lines)
    lines.clear()
    h.prepare(lines.append)
    assert lines == []


def test_mini_swe_agent_failed_install_is_typed_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", f"{_fake_uv(tmp_path, pip_rc=3)}{os.pathsep}{os.environ['PATH']}")
    h = MiniSweAgentHarness(python=sys.executable, cache_dir=tmp_path / "cache")
    with pytest.raises(HarnessInstallError, match=r"(?s)mini-swe-agent install failed.*pip failed"):
        h.prepare()
    gc.collect()
    assert not h.prefix.exists() and not h.installed()


def test_run_streamed_kills_the_installer_when_reading_is_interrupted() -> None:
    """`say` raising mid-output: the process is killed and reaped, the pipe closed."""

    def say(line: str) -> None:
        raise KeyboardInterrupt

    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_streamed(["sh", "-c", "echo one; exec sleep 60"], say)
    gc.collect()
    assert time.monotonic() - t0 < 30


def test_pin_matches_tools_versions_json() -> None:
    root = Path(__file__).resolve().parents[4]
    pins = json.loads((root / "tools/harnesses/versions.json").read_text())
    assert pins["mini-swe-agent"]["version"] == MiniSweAgentHarness.VERSION
    assert pins["mini-swe-agent"]["python"] == MiniSweAgentHarness().python
