"""Unit tests of the npm harness adapters (no podman, no install): pins, launches, outcomes,
install-once behaviour with a stand-in ``npm``, the scripted oracle in each shell tool."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clawrl.bench import load_builtin_suite
from clawrl.bench.harness import (
    NODE_HARNESS_NAMES,
    NODE_HARNESS_VERSIONS,
    ClaudeCodeHarness,
    CodexHarness,
    HarnessContext,
    HarnessInstallError,
    OpenClawHarness,
    PiHarness,
    get_harness,
    harness_names,
    scripted_oracle,
)
from clawrl.proxy import parse_completion

ROOT = Path(__file__).resolve().parents[4]


def _task(task_id: str = "csv_to_markdown"):  # type: ignore[no-untyped-def]
    return next(t for t in load_builtin_suite() if t.id == task_id)


def _ctx() -> HarnessContext:
    return HarnessContext(
        task=_task(),
        session_id="s1",
        api_key="k1",
        openai_base_url="http://127.0.0.1:8000/s/s1/v1",
        anthropic_base_url="http://127.0.0.1:8000/s/s1",
        model="policy",
        max_turns=5,
        max_tokens=100,
    )


def test_pins_match_tools_versions_json() -> None:
    pins = json.loads((ROOT / "tools/harnesses/versions.json").read_text())
    for name, pin in NODE_HARNESS_VERSIONS.items():
        assert {k: pins[name][k] for k in pin} == pin


def test_registry_builds_every_npm_harness() -> None:
    assert set(NODE_HARNESS_NAMES) <= set(harness_names())
    apis = {n: get_harness(n).api for n in NODE_HARNESS_NAMES}
    assert apis == {
        "claude-code": "anthropic.messages",
        "codex": "openai.responses",
        "pi": "openai.chat",
        "openclaw": "openai.chat",
        "openclaw-anthropic-messages": "anthropic.messages",
        "openclaw-openai-responses": "openai.responses",
    }
    with pytest.raises(ValueError, match="api_mode"):
        OpenClawHarness(api_mode="grpc")  # type: ignore[arg-type]


def test_launches(tmp_path: Path) -> None:
    ctx = _ctx()
    cc = ClaudeCodeHarness(cache_dir=tmp_path).launch(ctx)
    assert cc.env["ANTHROPIC_BASE_URL"] == ctx.anthropic_base_url
    assert cc.env["IS_SANDBOX"] == "1" and cc.env["CLAUDE_CODE_ATTRIBUTION_HEADER"] == "0"
    assert cc.env["HOME"].startswith("/tmp/") and cc.env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] == "100"
    assert cc.argv[cc.argv.index("--max-turns") + 1] == "5"
    assert cc.argv[0] == str(tmp_path / "claude-code-2.1.332/bin/claude")

    cx = CodexHarness(cache_dir=tmp_path).launch(ctx)
    assert cx.env["P_KEY"] == "k1" and cx.env["CODEX_HOME"] != cx.env["HOME"]
    assert any(ctx.openai_base_url in a and 'wire_api="responses"' in a for a in cx.argv)
    assert cx.argv[-1] == ctx.task.instruction

    pi = PiHarness(cache_dir=tmp_path).launch(ctx)
    models = json.loads(str(pi.files["/tmp/clawrl-harness/home/.pi/agent/models.json"]))
    prov = models["providers"]["clawrl"]
    assert prov["baseUrl"] == ctx.openai_base_url and prov["apiKey"] == "k1"
    assert prov["models"][0]["maxTokens"] == 100

    for mode, url in (
        ("openai-completions", ctx.openai_base_url),
        ("anthropic-messages", ctx.anthropic_base_url),
        ("openai-responses", ctx.openai_base_url),
    ):
        oc = OpenClawHarness(api_mode=mode, cache_dir=tmp_path)  # type: ignore[arg-type]
        launch = oc.launch(ctx)
        cfg_path = launch.argv[launch.argv.index("--config") + 1]
        cfg = json.loads(str(launch.files[cfg_path]))
        assert cfg["models"]["providers"]["clawrl"]["baseUrl"] == url
        assert cfg["models"]["providers"]["clawrl"]["api"] == mode
        assert launch.argv[1:3] == ("agent", "exec")
        assert oc.describe()["api_mode"] == mode and oc.describe()["node"] == "24.21.0"
        assert oc.mounts(ctx.task) == {str(oc.prefix): str(oc.prefix)}


def test_claude_code_outcome_reads_the_result_event() -> None:
    h = ClaudeCodeHarness()
    out = '{"type":"system"}\n{"type":"result","subtype":"success","num_turns":3}\n'
    o = h.outcome(0, {}, out)
    assert o.ok and o.end_reason == "final_answer" and o.turns == 3
    o = h.outcome(1, {}, '{"type":"result","subtype":"error_max_turns","num_turns":5}')
    assert o.ok and o.end_reason == "turn_limit"
    o = h.outcome(1, {}, '{"type":"result","subtype":"success","is_error":true,"num_turns":4}')
    assert o.ok and o.end_reason == "error_result" and o.turns == 4
    o = h.outcome(1, {}, "garbage")
    assert not o.ok and o.end_reason == "exit_code_1"
    assert not OpenClawHarness().outcome(2, {}, "").ok
    assert CodexHarness().outcome(0, {}, '{"type":"turn.completed"}').turns == 1


def _fake_npm(tmp_path: Path, rc: int) -> str:
    npm = tmp_path / "npm"
    npm.write_text(
        '#!/bin/sh\necho fake npm "$@"\nmkdir -p node_modules/.bin node_modules/node/bin\n'
        "for b in claude codex pi; do printf '#!/bin/sh\\n' > node_modules/.bin/$b; done\n"
        'case "$*" in *node@*) touch node_modules/node/bin/node;; esac\n'
        f"exit {rc}\n"
    )
    npm.chmod(0o755)
    return str(npm)


def test_prepare_installs_once_with_progress(tmp_path: Path) -> None:
    lines: list[str] = []
    h = PiHarness(cache_dir=tmp_path / "cache", npm=_fake_npm(tmp_path, 0))
    h.prepare(lines.append)
    assert h.installed() and (h.prefix / ".complete").is_file()
    assert any("fake npm install" in x and "pi-coding-agent@0.73.1" in x for x in lines)
    # pi's launcher is a Node script: the pinned Node comes from npm, first on its PATH
    assert any("fake npm install" in x and "node@24.21.0" in x for x in lines)
    assert f'export PATH="{h.node_bin}:$PATH"' in h.binary.read_text()
    lines.clear()
    h.prepare(lines.append)  # cached: npm is not run again
    assert lines == []
    # an install from before the Node pin (no node in the prefix) is installed again
    (h.node_bin / "node").unlink()
    assert not h.installed()
    h.prepare(lines.append)
    assert h.installed() and any("node@24.21.0" in x for x in lines)


def test_failed_install_is_typed_and_leaves_nothing(tmp_path: Path) -> None:
    h = CodexHarness(cache_dir=tmp_path / "cache", npm=_fake_npm(tmp_path, 3))
    with pytest.raises(HarnessInstallError, match="codex install failed"):
        h.prepare()
    assert not h.prefix.exists()


@pytest.mark.parametrize("name", ["claude-code", "codex", "pi", "openclaw"])
def test_scripted_oracle_uses_the_harness_shell_tool(name: str) -> None:
    h = get_harness(name)
    turns = scripted_oracle(h, _task())  # type: ignore[arg-type]
    assert len(turns) == 2
    first = parse_completion(turns[0], finish_reason="stop", stop_texts=())
    (call,) = first.tool_calls
    tool, arg = h.shell_tool  # type: ignore[attr-defined]
    assert call.name == tool and "base64 -d" in call.arguments[arg]
    assert not parse_completion(turns[1], finish_reason="stop", stop_texts=()).tool_calls


def test_harness_clients_wait_as_long_as_the_rollout(tmp_path: Path) -> None:
    """Each harness's own HTTP / run limit is the rollout's limit plus a minute, so on a slow
    backend (a long prefill queued behind others) the runner's speed-scaled timeout ends a
    rollout, never the harness's client (OpenClaw gives a local model 5 min for its first
    event, Codex 5 min of stream idleness, Claude Code 10 min per request)."""
    import dataclasses

    ctx = dataclasses.replace(_ctx(), timeout_s=1200.0)
    cc = ClaudeCodeHarness(cache_dir=tmp_path).launch(ctx)
    assert cc.env["API_TIMEOUT_MS"] == "1260000"
    cx = CodexHarness(cache_dir=tmp_path).launch(ctx)
    assert any("stream_idle_timeout_ms=1260000" in a for a in cx.argv)
    oc = OpenClawHarness(cache_dir=tmp_path).launch(ctx)
    assert oc.argv[oc.argv.index("--timeout") + 1] == "1260"
    cfg = json.loads(str(oc.files[oc.argv[oc.argv.index("--config") + 1]]))
    assert cfg["models"]["providers"]["clawrl"]["timeoutSeconds"] == 1260
