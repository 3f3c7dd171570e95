"""The reference harness program, driven by a scripted fake chat endpoint (a test fake,
named as such: the real path through podman + proxy is tested in the root tests/)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from clawrl.bench.harness import reference_agent_path

AGENT = reference_agent_path()


def _tool_call(i: int, name: str, args: dict[str, Any] | str) -> dict[str, Any]:
    raw = args if isinstance(args, str) else json.dumps(args)
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": raw}}


class FakeChatServer:
    """Answers POST /chat/completions with scripted assistant messages, records requests."""

    def __init__(self, script: list[dict[str, Any] | int]) -> None:
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests.append(
                    {"path": self.path, "auth": self.headers.get("Authorization"), "body": body}
                )
                step = outer.script.pop(0) if outer.script else {"content": "done"}
                if isinstance(step, int):
                    self.send_response(step)
                    self.end_headers()
                    self.wfile.write(b'{"error": {"message": "scripted failure"}}')
                    return
                payload = json.dumps(
                    {"choices": [{"index": 0, "message": {"role": "assistant", **step}}]}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/s/abc/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeChatServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _run(url: str, workdir: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    transcript = workdir / "transcript.json"
    proc = subprocess.run(
        [
            sys.executable,
            str(AGENT),
            "--base-url",
            url,
            "--api-key",
            "k1",
            "--task",
            "do it",
            "--workdir",
            str(workdir),
            "--transcript",
            str(transcript),
            "--retries",
            "1",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.returncode, json.loads(transcript.read_text())


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "notes.txt").write_text("alpha beta\n")
    yield tmp_path


def test_executes_all_four_tools_and_ends_on_final_answer(workdir: Path) -> None:
    script: list[dict[str, Any] | int] = [
        {
            "content": "",
            "tool_calls": [
                _tool_call(0, "write_file", {"path": "out/hello.txt", "content": "hi\n"})
            ],
        },
        {
            "content": "",
            "tool_calls": [
                _tool_call(
                    1, "edit_file", {"path": "notes.txt", "old_text": "beta", "new_text": "gamma"}
                ),
                _tool_call(2, "read_file", {"path": "notes.txt"}),
                _tool_call(3, "bash", {"command": "cat out/hello.txt; exit 3"}),
            ],
        },
        {"content": "All done."},
    ]
    with FakeChatServer(script) as server:
        code, transcript = _run(server.url, workdir)
    assert code == 0
    assert transcript["end_reason"] == "final_answer"
    assert (workdir / "out/hello.txt").read_text() == "hi\n"
    assert (workdir / "notes.txt").read_text() == "alpha gamma\n"
    assert [c["ok"] for c in transcript["tool_calls"]] == [True, True, True, False]
    # the tool results went back to the model, one tool message per call, in order
    last = server.requests[-1]["body"]["messages"]
    tool_msgs = [m for m in last if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == ["call_0", "call_1", "call_2", "call_3"]
    assert tool_msgs[2]["content"] == "alpha gamma\n"
    assert tool_msgs[3]["content"].startswith("exit code 3\nhi")
    assert server.requests[0]["path"] == "/s/abc/v1/chat/completions"
    assert server.requests[0]["auth"] == "Bearer k1"
    assert {t["function"]["name"] for t in server.requests[0]["body"]["tools"]} == {
        "bash",
        "read_file",
        "write_file",
        "edit_file",
    }


def test_bad_tool_calls_are_reported_to_the_model_not_crashing(workdir: Path) -> None:
    script: list[dict[str, Any] | int] = [
        {
            "content": "",
            "tool_calls": [
                _tool_call(0, "write_file", '{"path": "x.txt", "content": '),  # truncated JSON
                _tool_call(1, "no_such_tool", {}),
                _tool_call(
                    2, "edit_file", {"path": "notes.txt", "old_text": "zzz", "new_text": "y"}
                ),
                _tool_call(3, "read_file", {"path": "missing.txt"}),
            ],
        },
        {"content": "giving up"},
    ]
    with FakeChatServer(script) as server:
        code, transcript = _run(server.url, workdir)
    assert code == 0
    results = [m["content"] for m in server.requests[-1]["body"]["messages"] if m["role"] == "tool"]
    assert results[0].startswith("error: arguments are not valid JSON")
    assert results[1] == "error: unknown tool 'no_such_tool'"
    assert "occurs 0 times" in results[2]
    assert results[3].startswith("error:")
    assert not (workdir / "x.txt").exists()
    assert [c["ok"] for c in transcript["tool_calls"]] == [False] * 4


def test_turn_limit_ends_the_run(workdir: Path) -> None:
    loop = {"content": "", "tool_calls": [_tool_call(0, "bash", {"command": "true"})]}
    with FakeChatServer([loop] * 5) as server:
        code, transcript = _run(server.url, workdir, "--max-turns", "3")
    assert code == 0
    assert transcript["end_reason"] == "turn_limit"
    assert len(server.requests) == 3


def test_endpoint_failure_is_exit_2_after_retries(workdir: Path) -> None:
    with FakeChatServer([503, 503, 503]) as server:
        code, transcript = _run(server.url, workdir)
    assert code == 2
    assert transcript["end_reason"] == "model_error"
    assert "HTTP 503" in transcript["error"]
    assert len(server.requests) == 2  # first try + 1 retry


def test_client_error_is_not_retried(workdir: Path) -> None:
    with FakeChatServer([400]) as server:
        code, transcript = _run(server.url, workdir)
    assert code == 2 and "HTTP 400" in transcript["error"]
    assert len(server.requests) == 1


def test_messages_file_resumes_the_conversation(workdir: Path) -> None:
    """Multi-turn sessions: the second run sees the whole first conversation plus the new
    user message, and its transcript holds the whole updated conversation."""
    first: list[dict[str, Any] | int] = [
        {
            "content": "",
            "tool_calls": [_tool_call(0, "write_file", {"path": "a.txt", "content": "1"})],
        },
        {"content": "wrote a.txt"},
    ]
    with FakeChatServer(first) as server:
        code, t1 = _run(server.url, workdir)
    assert code == 0 and [m["role"] for m in t1["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert t1["tools"][0]["function"]["name"] == "bash"
    assert t1["tool_calls"][0]["tool_call_id"] == "call_0"
    saved = workdir / "conversation.json"
    saved.write_text(json.dumps(t1))
    second: list[dict[str, Any] | int] = [{"content": "a.txt holds 1"}]
    with FakeChatServer(second) as server:
        code, t2 = _run(
            server.url, workdir, "--messages-file", str(saved), "--task", "what is in a.txt?"
        )
    assert code == 0
    sent = server.requests[0]["body"]["messages"]
    assert sent[:5] == t1["messages"]
    assert sent[5] == {"role": "user", "content": "what is in a.txt?"}
    assert t2["messages"] == [*sent, {"role": "assistant", "content": "a.txt holds 1"}]
    # a plain message list works too, and a system prompt is added when missing
    saved.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    with FakeChatServer([{"content": "ok"}]) as server:
        code, t3 = _run(server.url, workdir, "--messages-file", str(saved))
    assert code == 0 and [m["role"] for m in t3["messages"]] == [
        "system",
        "user",
        "user",
        "assistant",
    ]


def test_malformed_messages_file_is_a_usage_error(workdir: Path) -> None:
    bad = workdir / "bad.json"
    bad.write_text('{"messages": 3}')
    proc = subprocess.run(
        [
            sys.executable,
            str(AGENT),
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--task",
            "x",
            "--messages-file",
            str(bad),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 64 and "--messages-file" in proc.stderr


def test_runs_on_stdlib_only() -> None:
    """The harness must run on a bare interpreter (the sandbox's python3): no third-party imports."""
    src = AGENT.read_text()
    import ast

    mods = set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Import):
            mods |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            mods.add(node.module.split(".")[0])
    assert mods <= set(sys.stdlib_module_names), mods - set(sys.stdlib_module_names)
