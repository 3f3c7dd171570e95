"""Harness adapters (launch descriptions and verdicts), the workspace diff and the oracle
as scripted turns — no podman needed; the real runs are in the root tests/test_bench_e2e.py."""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from pathlib import Path

import pytest
from clawrl.bench import (
    HarnessContext,
    HarnessInstallError,
    MiniSweAgentHarness,
    OracleHarness,
    ReferenceHarness,
    get_harness,
    harness_names,
    load_builtin_suite,
    oracle_completions,
    plan_rollouts,
    reference_agent_path,
    workspace_diff,
)
from clawrl.bench.harnesses import run_streamed
from clawrl.proxy import parse_completion
from hypothesis import given, settings
from hypothesis import strategies as st

TASK = next(t for t in load_builtin_suite() if t.id == "csv_to_markdown")


def _ctx(**kw: object) -> HarnessContext:
    base: dict[str, object] = {
        "task": TASK,
        "session_id": "s1",
        "api_key": "key-1",
        "openai_base_url": "http://127.0.0.1:8000/s/s1/v1",
        "anthropic_base_url": "http://127.0.0.1:8000/s/s1",
        "max_turns": 5,
        "max_tokens": 77,
    }
    base.update(kw)
    return HarnessContext(**base)  # type: ignore[arg-type]


def test_registry() -> None:
    names = harness_names()
    assert {"mini-swe-agent", "oracle", "reference"} <= set(names) and names == sorted(names)
    assert isinstance(get_harness("reference"), ReferenceHarness)
    h = OracleHarness()
    assert get_harness(h) is h
    with pytest.raises(ValueError, match=r"known: .*mini-swe-agent.*oracle.*reference"):
        get_harness("nope")


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
    pipe is closed (issue 18: an unclosed pipe was a ResourceWarning that failed the e2e
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


def test_oracle_mounts_the_solution_and_needs_no_model() -> None:
    h = OracleHarness()
    assert not h.needs_model and h.api is None
    assert TASK.solution is not None
    assert h.mounts(TASK) == {str(TASK.solution.files_dir.resolve()): "/solution"}
    assert h.launch(_ctx()).argv == tuple(TASK.solution.command)
    assert h.outcome(0, {}, "").ok and not h.outcome(1, {}, "").ok


def test_plan_groups_samples_per_task_and_harness() -> None:
    tasks = load_builtin_suite()[:2]
    specs = plan_rollouts(tasks, ["oracle", "reference"], samples=3)
    assert len(specs) == 12
    assert len({s.rollout_id for s in specs}) == 12
    groups = {s.group_id for s in specs}
    assert groups == {f"{t.id}/{h}" for t in tasks for h in ("oracle", "reference")}
    with pytest.raises(ValueError):
        plan_rollouts(tasks, ["oracle"], samples=0)


def test_oracle_completions_are_well_formed_tool_calls() -> None:
    turns = oracle_completions(TASK)
    assert len(turns) == 3
    parsed = [parse_completion(t, finish_reason="stop") for t in turns]
    assert [tc.name for tc in parsed[0].tool_calls] == ["write_file"]
    assert parsed[0].tool_calls[0].arguments["path"] == "/tmp/clawrl-oracle/solve.sh"
    assert [tc.name for tc in parsed[1].tool_calls] == ["bash"]
    assert parsed[1].tool_calls[0].arguments["command"] == (
        "cd /workspace && bash /tmp/clawrl-oracle/solve.sh"
    )
    assert not parsed[2].tool_calls and parsed[2].content == "Done."


def test_workspace_diff_kinds(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        (d / "sub").mkdir(parents=True)
        (d / "same.txt").write_text("x\n")
    (a / "gone.txt").write_text("bye\n")
    (a / "edit.txt").write_text("one\ntwo\n")
    (b / "edit.txt").write_text("one\nthree\n")
    (b / "sub" / "new.bin").write_bytes(b"\0\1\2")
    (b / "empty").mkdir()
    os.symlink("same.txt", b / "link")
    changes = {c.path: c for c in workspace_diff(a, b)}
    assert set(changes) == {"gone.txt", "edit.txt", "sub/new.bin", "empty", "link"}
    assert changes["gone.txt"].change == "removed" and changes["gone.txt"].size_after is None
    assert changes["edit.txt"].change == "changed"
    assert "-two" in (changes["edit.txt"].diff or "") and "+three" in (
        changes["edit.txt"].diff or ""
    )
    assert changes["sub/new.bin"].change == "added" and changes["sub/new.bin"].diff is None
    assert changes["empty"].kind == "dir" and changes["link"].kind == "symlink"
    assert workspace_diff(a, a) == []


@settings(max_examples=40, deadline=None)
@given(
    before=st.dictionaries(st.sampled_from("abcdef"), st.binary(max_size=8), max_size=6),
    after=st.dictionaries(st.sampled_from("abcdef"), st.binary(max_size=8), max_size=6),
)
def test_workspace_diff_matches_dict_difference(
    tmp_path_factory: pytest.TempPathFactory, before: dict[str, bytes], after: dict[str, bytes]
) -> None:
    root = tmp_path_factory.mktemp("ws")
    for name, files in (("a", before), ("b", after)):
        (root / name).mkdir()
        for k, v in files.items():
            (root / name / k).write_bytes(v)
    changes = {c.path: c.change for c in workspace_diff(root / "a", root / "b")}
    expected = {k: "added" for k in after.keys() - before.keys()}
    expected |= {k: "removed" for k in before.keys() - after.keys()}
    expected |= {k: "changed" for k in before.keys() & after.keys() if before[k] != after[k]}
    assert changes == expected
