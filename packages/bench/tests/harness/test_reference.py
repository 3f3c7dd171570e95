"""The reference harness adapter: mounts, launch description, verdicts, the command line
ise-synth drives it with — no podman needed (the program itself: test_reference_agent.py)."""

from __future__ import annotations

import json

from clawrl.bench.harness import (
    REFERENCE_AGENT_MOUNT,
    ReferenceHarness,
    reference_agent_path,
)

from .conftest import TASK
from .conftest import make_context as _ctx


def test_reference_launch_points_at_the_session_through_the_forwarder() -> None:
    h = ReferenceHarness()
    mounts = h.mounts(TASK)
    assert mounts == {str(reference_agent_path()): "/run/clawrl/harness/reference_agent.py"}
    launch = h.launch(_ctx())
    argv = list(launch.argv)
    assert argv[:2] == ["/usr/bin/python3", "/run/clawrl/harness/reference_agent.py"]
    assert argv[argv.index("--base-url") + 1] == "http://127.0.0.1:8000/s/s1/v1"
    assert argv[argv.index("--max-turns") + 1] == "5"
    assert argv[argv.index("--max-tokens") + 1] == "77"
    assert launch.env == {"OPENAI_API_KEY": "key-1"}  # the key is not on the command line
    assert "key-1" not in " ".join(argv)
    assert launch.workdir == "/workspace"
    assert TASK.instruction in launch.files.values()


def test_reference_outcomes() -> None:
    h = ReferenceHarness()
    ok = h.outcome(0, {"transcript": json.dumps({"end_reason": "turn_limit", "turns": 5})}, "")
    assert ok.ok and ok.end_reason == "turn_limit" and ok.turns == 5
    err = h.outcome(
        2, {"transcript": json.dumps({"end_reason": "model_error", "error": "HTTP 503"})}, ""
    )
    assert not err.ok and err.end_reason == "model_error" and "503" in err.reason
    crash = h.outcome(1, {}, "")
    assert not crash.ok and crash.end_reason == "exit_code_1"
    garbled = h.outcome(0, {"transcript": "{not json"}, "")
    assert not garbled.ok


def test_reference_agent_argv_resumes_a_transcript() -> None:
    """The command line ise-synth runs per user turn: the same program and flags as the
    rollout launch, plus ``--messages-file`` when it resumes the conversation."""
    h = ReferenceHarness(bash_timeout_s=30)
    kw = {
        "base_url": "http://127.0.0.1:8000/s/s1/v1",
        "model": "policy",
        "task_file": "/tmp/q.md",
        "workdir": "/workspace",
        "max_turns": 3,
        "transcript": "/tmp/t.json",
    }
    first = h.agent_argv(**kw)  # type: ignore[arg-type]
    assert first[:2] == ["/usr/bin/python3", REFERENCE_AGENT_MOUNT]
    assert first[first.index("--bash-timeout") + 1] == "30"
    assert "--messages-file" not in first and "--max-tokens" not in first
    again = h.agent_argv(**kw, max_tokens=64, messages_file="/tmp/t.json")  # type: ignore[arg-type]
    assert again[: len(first)] == first
    assert again[len(first) :] == ["--max-tokens", "64", "--messages-file", "/tmp/t.json"]
    launch = h.launch(_ctx())
    assert list(launch.argv)[:2] == first[:2] and "--request-timeout" in launch.argv
    assert h.mounts() == {str(reference_agent_path()): REFERENCE_AGENT_MOUNT}
