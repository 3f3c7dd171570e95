"""Capture the HTTP requests real agent harnesses send to their model provider.

Runs a recording model endpoint (starlette + uvicorn on 127.0.0.1) that speaks just enough of
four wire APIs for a harness to proceed -- OpenAI Chat Completions (streamed and not),
Anthropic Messages (streamed and not), OpenAI Responses (streamed and not) and ``GET /v1/models``
-- and runs each harness headless against it on the task "create a file hello.txt containing hi"
(the launches of ``clawrl.bench.harness`` -- the same argv, environment and config files as in
a rollout -- played on the host, with a temporary folder as ``log_dir``: fresh HOME and config
folders).

The scripted model answers, counting the tool results already in the conversation:

* 0 -> one shell tool call, in the harness's own tool schema (tool name and argument shape read
  from the tools it sent), running ``echo hi > hello.txt``; 1 -> another, ``cat hello.txt``.
  On Chat Completions and Messages they carry reasoning (Responses: a reasoning item), their
  tool-call ids contain non-alphanumerics and their arguments JSON has spaces -- so the later
  requests show how the harness echoes history (re-serialised arguments, rewritten ids, dropped
  reasoning), twice;
* 2 -> a final text (mini-swe-agent: its final command
  ``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``);
* a request without tools (titles, summaries) -> a short text.

Every request is saved as ``<out>/<harness>/<NN>-<api>.json`` =
``{"harness", "version", "method", "path", "query", "headers", "body"}`` (plus ``api_mode`` for
OpenClaw), authentication header values redacted and strings longer than ``--max-chars``
shortened to their head + ``"…[shortened]"`` (every field and structure kept). What the endpoint
answered is saved next to it in ``<out>/<harness>/responses/<NN>-<api>.{sse,json}``.

Usage (installs the pinned harnesses first with the adapters' ``prepare``, cached in the layout
of tools/harnesses/install.sh)::

    uv run python tools/harnesses/capture_requests.py                      # all harnesses
    uv run python tools/harnesses/capture_requests.py --only codex pi
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import uvicorn
from clawrl.bench import Layout, Task, VerifierSpec
from clawrl.bench.harness import (
    CachedHarness,
    ClaudeCodeHarness,
    CodexHarness,
    HarnessAdapter,
    HarnessContext,
    HarnessLaunch,
    MiniSweAgentHarness,
    OpenClawHarness,
    PiHarness,
)
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
DEFAULT_OUT = REPO / "packages/proxy/tests/fixtures/harness_requests"
TASK = "create a file hello.txt containing hi"
COMMANDS = ("echo hi > hello.txt", "cat hello.txt")
MINI_SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
MODEL = "clawrl-policy"
API_KEY = "sk-clawrl-capture-0000"
FINAL_TEXT = "Done: hello.txt now contains hi."
REASONING = "The user wants hello.txt containing hi. One shell command does it."
# Non-alphanumerics in ids and spaces in argument JSON make history-echo rewrites visible.
CHAT_CALL_ID = "call_9a1f-b2c3.d{}"
ANTHROPIC_CALL_ID = "toolu_01-A09q90qw90lq917835lq{}"
RESPONSES_CALL_ID = "call_7e2d-11aa.f{}"
SHELL_TOOL_NAMES = ("bash", "shell", "exec", "exec_command", "shell_command", "run_shell_command")
REDACT_HEADERS = {"authorization", "x-api-key", "api-key", "cookie", "proxy-authorization"}
SHORTENED = "…[shortened]"
MAX_REQUESTS = 8


# ----------------------------------------------------------------------------- recording


@dataclass
class Capture:
    """One harness run's captured traffic."""

    folder: str
    harness: str
    version: str
    api_mode: str | None
    requests: list[dict[str, Any]] = field(default_factory=list)
    responses: list[tuple[str, str]] = field(default_factory=list)  # (suffix, text)


class Recorder:
    """Holds the capture of the harness currently running (harnesses run one at a time)."""

    def __init__(self) -> None:
        self.current: Capture | None = None
        self.lock = threading.Lock()

    def add(self, record: dict[str, Any]) -> int:
        with self.lock:
            if self.current is None:
                return -1
            self.current.requests.append(record)
            self.current.responses.append(("", ""))
            return len(self.current.requests) - 1

    def set_response(self, index: int, suffix: str, text: str) -> None:
        with self.lock:
            if self.current is not None and 0 <= index < len(self.current.responses):
                self.current.responses[index] = (suffix, text)


RECORDER = Recorder()


def _decode_body(raw: bytes, encoding: str) -> Any:
    if encoding == "gzip":
        import gzip

        raw = gzip.decompress(raw)
    elif encoding == "zstd":
        import zstandard

        raw = zstandard.ZstdDecompressor().decompressobj().decompress(raw)
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return {"__raw_text__": raw.decode("utf-8", "replace")}


async def _record(request: Request, api: str) -> tuple[int, Any]:
    raw = await request.body()
    body = _decode_body(raw, request.headers.get("content-encoding", ""))
    headers = {
        k.lower(): ("<redacted>" if k.lower() in REDACT_HEADERS else v)
        for k, v in request.headers.items()
    }
    record = {
        "api": api,
        "method": request.method,
        "path": request.url.path,
        "query": dict(request.query_params),
        "headers": headers,
        "body": body,
    }
    return RECORDER.add(record), body


def _sse(events: list[tuple[str | None, Any]]) -> str:
    out = []
    for name, data in events:
        payload = data if isinstance(data, str) else json.dumps(data)
        out.append((f"event: {name}\n" if name else "") + f"data: {payload}\n\n")
    return "".join(out)


def _stream(index: int, text: str) -> StreamingResponse:
    RECORDER.set_response(index, "sse", text)

    async def gen() -> AsyncIterator[bytes]:
        # event by event, as a real server would flush them
        for chunk in text.split("\n\n"):
            if chunk:
                yield (chunk + "\n\n").encode()
                await asyncio.sleep(0)

    return StreamingResponse(
        gen(), media_type="text/event-stream", headers={"cache-control": "no-cache"}
    )


def _json(index: int, obj: Any, status: int = 200) -> JSONResponse:
    RECORDER.set_response(index, "json", json.dumps(obj, indent=1, ensure_ascii=False))
    return JSONResponse(obj, status_code=status)


# ----------------------------------------------------------------------------- tool schemas


def _tool_schema(tools: list[Any] | None) -> tuple[str, dict[str, Any]] | None:
    """Find the harness's shell tool: (name, JSON-schema of its parameters)."""
    found: dict[str, dict[str, Any]] = {}
    for tool in tools or []:
        if not isinstance(tool, dict):
            continue
        if isinstance(tool.get("function"), dict):  # Chat Completions
            fn = tool["function"]
            found[fn.get("name", "")] = fn.get("parameters") or {}
        elif "input_schema" in tool:  # Anthropic
            found[tool.get("name", "")] = tool.get("input_schema") or {}
        elif tool.get("type") == "function":  # Responses
            found[tool.get("name", "")] = tool.get("parameters") or {}
        elif tool.get("type") == "namespace":  # Responses namespace of functions
            for sub in tool.get("tools") or []:
                if isinstance(sub, dict) and sub.get("type") == "function":
                    found[sub.get("name", "")] = sub.get("parameters") or {}
    for want in SHELL_TOOL_NAMES:
        for name, schema in found.items():
            if name.lower() == want:
                return name, schema
    return None


def _shell_args(schema: dict[str, Any], command: str) -> dict[str, Any]:
    """Arguments for the shell tool: the command in the shape its schema asks for."""
    props = schema.get("properties") or {}
    key = next((k for k in ("command", "cmd", "script") if k in props), "command")
    prop = props.get(key) or {}
    args: dict[str, Any] = {}
    if prop.get("type") == "array":
        args[key] = ["bash", "-lc", command]
    else:
        args[key] = command
    for name in schema.get("required") or []:
        if name in args:
            continue
        p = props.get(name) or {}
        kind = p.get("type")
        if name == "description":
            args[name] = "Create hello.txt containing hi"
        elif kind in ("integer", "number"):
            args[name] = 10000
        elif kind == "boolean":
            args[name] = False
        elif kind == "array":
            args[name] = []
        elif kind == "object":
            args[name] = {}
        else:
            args[name] = "."
    return args


def _tool_results(kind: str, body: dict[str, Any]) -> int:
    """How many tool results the conversation holds (wherever they sit: OpenClaw moves an
    internal-context user message to the end every turn, so "ends in" would not do)."""
    if kind == "chat":
        msgs = body.get("messages") or []
        return sum(isinstance(m, dict) and m.get("role") == "tool" for m in msgs)
    if kind == "messages":
        return sum(
            isinstance(b, dict) and b.get("type") == "tool_result"
            for m in body.get("messages") or []
            if isinstance(m, dict) and isinstance(m.get("content"), list)
            for b in m["content"]
        )
    items = body.get("input")
    if not isinstance(items, list):
        return 0
    return sum(
        isinstance(item, dict)
        and item.get("type")
        in ("function_call_output", "custom_tool_call_output", "local_shell_call_output")
        for item in items
    )


Plan = tuple[str, str, dict[str, Any], int]  # ("tool", name, args, step) or ("text", text, {}, 0)


def _plan(kind: str, body: Any) -> Plan:
    """What the scripted model says next: step 0 and 1 are tool calls (COMMANDS), then a final
    text -- or, for mini-swe-agent, its submit command."""
    if not isinstance(body, dict):
        return ("text", "ok", {}, 0)
    tool = _tool_schema(body.get("tools"))
    is_mini = RECORDER.current is not None and RECORDER.current.harness == "mini-swe-agent"
    step = _tool_results(kind, body)
    # a guard against loops: after MAX_REQUESTS requests of one run, always finish
    if RECORDER.current is not None and len(RECORDER.current.requests) > MAX_REQUESTS:
        step = len(COMMANDS)
    if step < len(COMMANDS):
        command = COMMANDS[step]
    elif is_mini:
        command = MINI_SUBMIT
    else:
        return ("text", FINAL_TEXT if tool is not None or step else "ok", {}, 0)
    if tool is None:
        if is_mini:
            return ("text", f"{REASONING}\n\n```mswea_bash_command\n{command}\n```", {}, 0)
        return ("text", "ok", {}, 0)
    name, schema = tool
    return ("tool", name, _shell_args(schema, command), step)


async def _model_request(
    request: Request, api: str, kind: str
) -> tuple[int, Plan, dict[str, Any], Any]:
    """Record a model request (as ``api``) and plan its answer (for ``kind``): the record's
    index, the plan, the body if it is a JSON object (else ``{}``) and the model it names."""
    index, body = await _record(request, api)
    plan = _plan(kind, body)
    body = body if isinstance(body, dict) else {}
    return index, plan, body, body.get("model", MODEL)


# ----------------------------------------------------------------------------- chat completions


async def chat_completions(request: Request) -> Response:
    index, plan, body, model = await _model_request(request, "chat-completions", "chat")
    cid, created = f"chatcmpl-{uuid.uuid4().hex[:12]}", int(time.time())
    usage = {"prompt_tokens": 1000, "completion_tokens": 20, "total_tokens": 1020}
    if plan[0] == "tool":
        args = json.dumps(plan[2])  # with spaces: ", " and ": "
        call = {
            "id": CHAT_CALL_ID.format(plan[3]),
            "type": "function",
            "function": {"name": plan[1], "arguments": args},
        }
        message: dict[str, Any] = {
            "role": "assistant",
            "content": None,
            "reasoning_content": REASONING,
            "tool_calls": [call],
        }
        finish = "tool_calls"
    else:
        message = {"role": "assistant", "content": plan[1]}
        finish = "stop"
    if not body.get("stream"):
        return _json(
            index,
            {
                "id": cid,
                "object": "chat.completion",
                "created": created,
                "model": model,
                "choices": [
                    {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
                ],
                "usage": usage,
            },
        )

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        return {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [
                {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
            ],
        }

    events: list[tuple[str | None, Any]] = [(None, chunk({"role": "assistant", "content": ""}))]
    if plan[0] == "tool":
        events.append((None, chunk({"reasoning_content": REASONING})))
        args = message["tool_calls"][0]["function"]["arguments"]
        half = len(args) // 2
        events.append(
            (
                None,
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": CHAT_CALL_ID.format(plan[3]),
                                "type": "function",
                                "function": {"name": plan[1], "arguments": args[:half]},
                            }
                        ]
                    }
                ),
            )
        )
        events.append(
            (None, chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[half:]}}]}))
        )
    else:
        events.append((None, chunk({"content": plan[1]})))
    events.append((None, chunk({}, finish)))
    if (body.get("stream_options") or {}).get("include_usage"):
        events.append(
            (
                None,
                {
                    "id": cid,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": usage,
                },
            )
        )
    events.append((None, "[DONE]"))
    return _stream(index, _sse(events))


# ----------------------------------------------------------------------------- anthropic


async def anthropic_messages(request: Request) -> Response:
    index, plan, body, model = await _model_request(request, "messages", "messages")
    mid = f"msg_{uuid.uuid4().hex[:20]}"
    blocks: list[dict[str, Any]] = []
    if plan[0] == "tool":
        blocks.append(
            {
                "type": "thinking",
                "thinking": REASONING,
                "signature": "c2lnbmF0dXJlLW9mLXRoZS10aGlua2luZy1ibG9jaw==",
            }
        )
        blocks.append({"type": "text", "text": "I'll create the file."})
        blocks.append(
            {
                "type": "tool_use",
                "id": ANTHROPIC_CALL_ID.format(plan[3]),
                "name": plan[1],
                "input": plan[2],
            }
        )
        stop = "tool_use"
    else:
        blocks.append({"type": "text", "text": plan[1]})
        stop = "end_turn"
    usage = {
        "input_tokens": 1000,
        "output_tokens": 20,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    if not body.get("stream"):
        return _json(
            index,
            {
                "id": mid,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": blocks,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": usage,
            },
        )
    events: list[tuple[str | None, Any]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": mid,
                    "type": "message",
                    "role": "assistant",
                    "model": model,
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {**usage, "output_tokens": 1},
                },
            },
        )
    ]
    for i, block in enumerate(blocks):
        if block["type"] == "thinking":
            start: dict[str, Any] = {"type": "thinking", "thinking": ""}
            deltas = [
                {"type": "thinking_delta", "thinking": block["thinking"]},
                {"type": "signature_delta", "signature": block["signature"]},
            ]
        elif block["type"] == "text":
            start = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": block["text"]}]
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            args = json.dumps(block["input"])
            deltas = [
                {"type": "input_json_delta", "partial_json": args[: len(args) // 2]},
                {"type": "input_json_delta", "partial_json": args[len(args) // 2 :]},
            ]
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": start},
            )
        )
        for d in deltas:
            events.append(
                ("content_block_delta", {"type": "content_block_delta", "index": i, "delta": d})
            )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": i}))
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 20},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return _stream(index, _sse(events))


async def anthropic_count_tokens(request: Request) -> Response:
    index, _ = await _record(request, "count-tokens")
    return _json(index, {"input_tokens": 1000})


# ----------------------------------------------------------------------------- responses


async def responses(request: Request) -> Response:
    index, plan, body, model = await _model_request(request, "responses", "responses")
    rid, created = f"resp_{uuid.uuid4().hex[:20]}", int(time.time())
    items: list[dict[str, Any]] = []
    if plan[0] == "tool":
        items.append(
            {
                "type": "reasoning",
                "id": f"rs_{uuid.uuid4().hex[:16]}",
                "summary": [{"type": "summary_text", "text": REASONING}],
                "encrypted_content": "ZW5jcnlwdGVkLXJlYXNvbmluZy1wbGFjZWhvbGRlcg==",
            }
        )
        items.append(
            {
                "type": "function_call",
                "id": f"fc_{uuid.uuid4().hex[:16]}",
                "call_id": RESPONSES_CALL_ID.format(plan[3]),
                "name": plan[1],
                "arguments": json.dumps(plan[2]),
                "status": "completed",
            }
        )
    else:
        items.append(
            {
                "type": "message",
                "id": f"msg_{uuid.uuid4().hex[:16]}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": plan[1], "annotations": []}],
            }
        )
    usage = {
        "input_tokens": 1000,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 20,
        "output_tokens_details": {"reasoning_tokens": 10},
        "total_tokens": 1020,
    }
    base = {
        "id": rid,
        "object": "response",
        "created_at": created,
        "model": model,
        "status": "in_progress",
        "output": [],
        "usage": None,
        "error": None,
        "incomplete_details": None,
    }
    done = {**base, "status": "completed", "output": items, "usage": usage}
    if not body.get("stream"):
        return _json(index, done)
    seq = iter(range(10_000))
    events: list[tuple[str | None, Any]] = []

    def ev(name: str, **data: Any) -> None:
        events.append((name, {"type": name, "sequence_number": next(seq), **data}))

    ev("response.created", response=base)
    ev("response.in_progress", response=base)
    for i, item in enumerate(items):
        if item["type"] == "reasoning":
            ev(
                "response.output_item.added",
                output_index=i,
                item={**item, "summary": [], "encrypted_content": None},
            )
            ev(
                "response.reasoning_summary_part.added",
                item_id=item["id"],
                output_index=i,
                summary_index=0,
                part={"type": "summary_text", "text": ""},
            )
            ev(
                "response.reasoning_summary_text.delta",
                item_id=item["id"],
                output_index=i,
                summary_index=0,
                delta=REASONING,
            )
            ev(
                "response.reasoning_summary_text.done",
                item_id=item["id"],
                output_index=i,
                summary_index=0,
                text=REASONING,
            )
            ev(
                "response.reasoning_summary_part.done",
                item_id=item["id"],
                output_index=i,
                summary_index=0,
                part={"type": "summary_text", "text": REASONING},
            )
        elif item["type"] == "function_call":
            ev(
                "response.output_item.added",
                output_index=i,
                item={**item, "arguments": "", "status": "in_progress"},
            )
            ev(
                "response.function_call_arguments.delta",
                item_id=item["id"],
                output_index=i,
                delta=item["arguments"],
            )
            ev(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=i,
                arguments=item["arguments"],
            )
        else:
            text = item["content"][0]["text"]
            ev(
                "response.output_item.added",
                output_index=i,
                item={**item, "content": [], "status": "in_progress"},
            )
            ev(
                "response.content_part.added",
                item_id=item["id"],
                output_index=i,
                content_index=0,
                part={"type": "output_text", "text": "", "annotations": []},
            )
            ev(
                "response.output_text.delta",
                item_id=item["id"],
                output_index=i,
                content_index=0,
                delta=text,
            )
            ev(
                "response.output_text.done",
                item_id=item["id"],
                output_index=i,
                content_index=0,
                text=text,
            )
            ev(
                "response.content_part.done",
                item_id=item["id"],
                output_index=i,
                content_index=0,
                part=item["content"][0],
            )
        ev("response.output_item.done", output_index=i, item=item)
    ev("response.completed", response=done)
    return _stream(index, _sse(events))


# ----------------------------------------------------------------------------- misc routes


async def models(request: Request) -> Response:
    index, _ = await _record(request, "models")
    entry = {
        "id": MODEL,
        "object": "model",
        "created": 0,
        "owned_by": "clawrl",
        # Anthropic-style fields for clients that list models the Anthropic way
        "type": "model",
        "display_name": MODEL,
        "created_at": "2026-01-01T00:00:00Z",
    }
    return _json(
        index,
        {"object": "list", "data": [entry], "has_more": False, "first_id": MODEL, "last_id": MODEL},
    )


async def fallback(request: Request) -> Response:
    index, _ = await _record(request, "other")
    if request.method == "HEAD" or request.url.path in ("/", "/health"):
        return _json(index, {"ok": True})
    return _json(index, {"error": {"type": "not_found", "message": request.url.path}}, 404)


def build_app() -> Starlette:
    routes = []
    for prefix in ("", "/v1"):
        routes += [
            Route(f"{prefix}/chat/completions", chat_completions, methods=["POST"]),
            Route(f"{prefix}/messages", anthropic_messages, methods=["POST"]),
            Route(f"{prefix}/messages/count_tokens", anthropic_count_tokens, methods=["POST"]),
            Route(f"{prefix}/responses", responses, methods=["POST"]),
            Route(f"{prefix}/models", models, methods=["GET"]),
        ]
    routes.append(
        Route("/{path:path}", fallback, methods=["GET", "POST", "HEAD", "PUT", "DELETE", "PATCH"])
    )
    return Starlette(routes=routes)


@contextlib.contextmanager
def serve() -> Iterator[str]:
    """Run the recording endpoint in a thread; yields its base URL (no trailing slash)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = uvicorn.Config(
        build_app(), host="127.0.0.1", port=port, log_level="warning", lifespan="off"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=5)


# ----------------------------------------------------------------------------- harnesses

# (folder name, adapter): the launches are clawrl.bench.harness's own, played on the host
HARNESSES: list[tuple[str, Callable[[], CachedHarness]]] = [
    ("claude-code", lambda: ClaudeCodeHarness(lean=False)),  # everything it sends by default
    ("claude-code-lean", ClaudeCodeHarness),  # the proxy-friendly extra flags
    ("codex", CodexHarness),
    ("pi", PiHarness),
    ("mini-swe-agent", MiniSweAgentHarness),
    ("openclaw-openai-completions", OpenClawHarness),
    ("openclaw-anthropic-messages", lambda: OpenClawHarness(api_mode="anthropic-messages")),
    ("openclaw-openai-responses", lambda: OpenClawHarness(api_mode="openai-responses")),
]


def host_launch(harness: HarnessAdapter, url: str, tmp: Path) -> tuple[HarnessLaunch, Path]:
    """The adapter's launch for the capture task, on the host: ``log_dir`` (and so ``HOME``
    and every config file) under ``tmp``, the workspace ``tmp/work``; its files written.
    Returns the launch and the workspace."""
    work = tmp / "work"
    work.mkdir()
    task = Task(
        id="capture-hello",
        instruction=TASK,
        layout=Layout.BUILTIN,
        root=tmp,
        workspace_path=str(work),
        verifier=VerifierSpec(files_dir=tmp, command=("true",)),
    )
    ctx = HarnessContext(
        task=task,
        api_key=API_KEY,
        openai_base_url=f"{url}/v1",
        anthropic_base_url=url,
        model=MODEL,
        log_dir=str(tmp / "harness"),
    )
    launch = harness.launch(ctx)
    for dest, content in launch.files.items():
        path = Path(dest)
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            copy = shutil.copytree if content.is_dir() else shutil.copyfile
            copy(content, path)
        else:
            path.write_bytes(content.encode() if isinstance(content, str) else content)
    return launch, work


def host_env(tmp: Path, launch: HarnessLaunch) -> dict[str, str]:
    """This process's environment without provider settings, a fresh ``HOME`` under ``tmp``
    (for harnesses whose launch sets none), then the launch's own variables."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI", "ANTHROPIC", "CLAUDE", "CODEX", "VIRTUAL_ENV"))
    }
    env.update(HOME=str(tmp / "home"), XDG_CONFIG_HOME=str(tmp / "home/.config"))
    env.update(launch.env)
    return env


# ----------------------------------------------------------------------------- saving


def shorten(value: Any, max_chars: int) -> Any:
    """Strings longer than ``max_chars`` -> their head + "…[shortened]"; structure kept."""
    if isinstance(value, str):
        return value if len(value) <= max_chars else value[:max_chars] + SHORTENED
    if isinstance(value, list):
        return [shorten(v, max_chars) for v in value]
    if isinstance(value, dict):
        return {k: shorten(v, max_chars) for k, v in value.items()}
    return value


def save(capture: Capture, out: Path, max_chars: int) -> list[Path]:
    folder = out / capture.folder
    if folder.exists():
        shutil.rmtree(folder)
    (folder / "responses").mkdir(parents=True)
    paths = []
    for i, (rec, (suffix, text)) in enumerate(
        zip(capture.requests, capture.responses, strict=True), start=1
    ):
        doc: dict[str, Any] = {"harness": capture.harness, "version": capture.version}
        if capture.api_mode:
            doc["api_mode"] = capture.api_mode
        doc.update({k: rec[k] for k in ("method", "path", "query", "headers")})
        doc["body"] = shorten(rec["body"], max_chars)
        path = folder / f"{i:02d}-{rec['api']}.json"
        path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
        paths.append(path)
        if suffix:
            (folder / "responses" / f"{i:02d}-{rec['api']}.{suffix}").write_text(text)
    return paths


# ----------------------------------------------------------------------------- main


def run_one(
    folder: str, harness: CachedHarness, url: str, args: argparse.Namespace, summary: dict[str, Any]
) -> bool:
    """Run one harness against the recording endpoint and save its capture; True if it
    exited 0 with hello.txt = hi."""
    tmp = Path(tempfile.mkdtemp(prefix=f"clawrl-capture-{folder}-"))
    launch, work = host_launch(harness, url, tmp)
    capture = Capture(
        folder=folder,
        harness=harness.key,
        version=harness.version,
        api_mode=getattr(harness, "api_mode", None),
    )
    RECORDER.current = capture
    print(f"[capture] {folder}: {' '.join(launch.argv[:3])} … (tmp={tmp})", flush=True)
    t0 = time.monotonic()
    try:
        proc = subprocess.run(
            list(launch.argv),
            env=host_env(tmp, launch),
            cwd=launch.workdir,
            timeout=args.timeout,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        rc, log = proc.returncode, proc.stdout.decode("utf-8", "replace")
    except subprocess.TimeoutExpired as exc:
        rc, log = -1, (exc.output or b"").decode("utf-8", "replace")
    RECORDER.current = None
    hello = work / "hello.txt"
    solved = hello.exists() and hello.read_text().strip() == "hi"
    (tmp / "harness.log").write_text(log)
    paths = save(capture, args.out, args.max_chars)
    secs = time.monotonic() - t0
    summary[folder] = {
        "exit": rc,
        "hello_txt": solved,
        "requests": len(paths),
        "seconds": round(secs, 1),
    }
    print(
        f"[capture] {folder}: exit {rc}, hello.txt ok={solved}, "
        f"{len(paths)} requests, {secs:.0f} s",
        flush=True,
    )
    if rc != 0 or not solved:
        print("[capture]   log tail:\n" + log[-3000:], flush=True)
        return False
    if not args.keep_tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="harness folders to capture (default: all)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--max-chars", type=int, default=2000)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per harness run")
    parser.add_argument("--keep-tmp", action="store_true", help="keep the temporary HOMEs")
    args = parser.parse_args(argv)
    chosen = [(f, make()) for f, make in HARNESSES if not args.only or f in args.only]
    if not chosen:
        parser.error(f"--only: choose among {[f for f, _ in HARNESSES]}")
    for _folder, harness in chosen:  # install once, cached (the layout of install.sh)
        harness.prepare(lambda line: print(f"[install] {line}", flush=True))
    summary: dict[str, Any] = {}
    with serve() as url:
        print(f"[capture] recording endpoint at {url}", flush=True)
        ok = [run_one(folder, harness, url, args, summary) for folder, harness in chosen]
    print(json.dumps(summary, indent=1))
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
