#!/usr/bin/env python3
"""clawrl reference harness: a minimal tool-calling agent loop (OpenAI Chat Completions).

A single stdlib-only program, run by the sandbox's own ``python3`` as its own process (no
virtual environment). It talks to an OpenAI-compatible ``/chat/completions`` endpoint (the
rollout's proxy session), offers four tools — ``bash``, ``read_file``, ``write_file``,
``edit_file`` — executes every tool call the model makes in the working directory, and stops
when the model answers without tool calls or the turn limit is reached.

Usage::

    python3 reference_agent.py --base-url http://127.0.0.1:8000/s/<id>/v1 \
        --model policy --task "create hello.txt containing hi" [--max-turns 20] \
        [--workdir /workspace] [--transcript /logs/agent/transcript.json] \
        [--messages-file /tmp/conversation.json]

``--messages-file`` resumes a multi-turn session: the file holds the conversation so far (a
JSON list of chat messages, or a transcript object with ``messages``); the task becomes the
next user message appended to it, and the transcript's ``messages`` is the whole updated
conversation (so it can be passed back as ``--messages-file`` for the next user turn).

The API key comes from ``$OPENAI_API_KEY`` (or ``--api-key``).

Exit codes: 0 the agent ended by itself (``end_reason`` "final_answer") or at its turn limit
("turn_limit"); 2 the model endpoint failed (after retries) or answered garbage; 64 bad usage.
The transcript (JSON) records every message, every tool execution (exit code, duration) and
the end reason.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

SYSTEM_PROMPT = (
    "You are a capable software agent working in a Linux workspace. Use the tools to inspect "
    "and change files and to run commands; paths are relative to the working directory. "
    "When the task is done, answer with a short summary and no tool call."
)

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a bash command in the working directory; returns exit code and output.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string", "description": "The command."}},
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a text file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Create or overwrite a text file with the given content.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "edit_file",
            "description": "Replace the single occurrence of old_text with new_text in a file.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "old_text": {"type": "string"},
                    "new_text": {"type": "string"},
                },
                "required": ["path", "old_text", "new_text"],
            },
        },
    },
]

OUTPUT_CAP = 16_000  # characters of tool output returned to the model


class ModelAPIError(Exception):
    """The model endpoint failed or answered something that is not a chat completion."""


def _cap(text: str) -> str:
    if len(text) <= OUTPUT_CAP:
        return text
    half = OUTPUT_CAP // 2
    return text[:half] + f"\n...[{len(text) - OUTPUT_CAP} characters cut]...\n" + text[-half:]


def run_tool(name: str, raw_args: str, workdir: Path, bash_timeout: float) -> tuple[str, bool]:
    """Execute one tool call. Returns (result text for the model, ok)."""
    try:
        args = json.loads(raw_args) if raw_args.strip() else {}
    except json.JSONDecodeError as exc:
        return f"error: arguments are not valid JSON ({exc.msg})", False
    if not isinstance(args, dict):
        return "error: arguments must be a JSON object", False
    if name not in {"bash", "read_file", "write_file", "edit_file"}:
        return f"error: unknown tool {name!r}", False
    try:
        if name == "bash":
            command = args.get("command")
            if not isinstance(command, str):
                return "error: missing string argument 'command'", False
            try:
                proc = subprocess.run(
                    ["bash", "-c", command],
                    cwd=workdir,
                    capture_output=True,
                    text=True,
                    errors="replace",
                    timeout=bash_timeout,
                )
            except subprocess.TimeoutExpired:
                return f"error: command timed out after {bash_timeout:g} s", False
            out = proc.stdout + (("\n[stderr]\n" + proc.stderr) if proc.stderr else "")
            return _cap(f"exit code {proc.returncode}\n{out}"), proc.returncode == 0
        path_arg = args.get("path")
        if not isinstance(path_arg, str) or not path_arg:
            return "error: missing string argument 'path'", False
        path = (workdir / path_arg).resolve() if not os.path.isabs(path_arg) else Path(path_arg)
        if name == "read_file":
            return _cap(path.read_text(errors="replace")), True
        if name == "write_file":
            content = args.get("content")
            if not isinstance(content, str):
                return "error: missing string argument 'content'", False
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
            return f"wrote {len(content)} characters to {path_arg}", True
        if name == "edit_file":
            old, new = args.get("old_text"), args.get("new_text")
            if not isinstance(old, str) or not isinstance(new, str):
                return "error: missing string arguments 'old_text' and 'new_text'", False
            text = path.read_text()
            count = text.count(old)
            if count != 1:
                return (
                    f"error: old_text occurs {count} times in {path_arg} (must be exactly 1)",
                    False,
                )
            path.write_text(text.replace(old, new, 1))
            return f"edited {path_arg}", True
        return f"error: unknown tool {name!r}", False
    except OSError as exc:
        return f"error: {exc.strerror or exc}", False


def chat(
    base_url: str, api_key: str, body: dict[str, Any], timeout: float, retries: int
) -> dict[str, Any]:
    """POST /chat/completions; retries connection errors and 5xx/429 with backoff."""
    data = json.dumps(body).encode()
    url = base_url.rstrip("/") + "/chat/completions"
    last: Exception | None = None
    for attempt in range(retries + 1):
        req = urllib.request.Request(
            url,
            data=data,
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {api_key}"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                payload = json.loads(resp.read())
            if not isinstance(payload, dict) or not payload.get("choices"):
                raise ModelAPIError(f"not a chat completion: {str(payload)[:200]}")
            return payload
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:500].decode(errors="replace")
            last = ModelAPIError(f"HTTP {exc.code}: {detail}")
            if exc.code < 500 and exc.code != 429:
                raise last from exc
        except (urllib.error.URLError, TimeoutError, ConnectionError, json.JSONDecodeError) as exc:
            last = ModelAPIError(f"{type(exc).__name__}: {exc}")
        if attempt < retries:
            time.sleep(min(8.0, 0.5 * 2**attempt))
    assert last is not None
    raise last


def load_messages(path: str) -> list[dict[str, Any]]:
    """The prior conversation of ``--messages-file`` (a list of messages or a transcript);
    a system prompt is prepended when it has none. Raises ValueError when malformed."""
    data = json.loads(Path(path).read_text())
    if isinstance(data, dict):
        data = data.get("messages")
    if not isinstance(data, list) or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) for m in data
    ):
        raise ValueError(f"{path}: expected a list of chat messages")
    messages = [dict(m) for m in data]
    if not messages or messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": SYSTEM_PROMPT})
    return messages


def run_agent(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(args.workdir).resolve()
    messages: list[dict[str, Any]] = (
        load_messages(args.messages_file)
        if args.messages_file
        else [{"role": "system", "content": SYSTEM_PROMPT}]
    )
    messages.append({"role": "user", "content": args.task})
    transcript: dict[str, Any] = {
        "harness": "reference",
        "model": args.model,
        "turns": 0,
        "tool_calls": [],
        "tools": TOOLS,
    }
    end_reason = "turn_limit"
    for turn in range(args.max_turns):
        body: dict[str, Any] = {"model": args.model, "messages": messages, "tools": TOOLS}
        if args.max_tokens:
            body["max_tokens"] = args.max_tokens
        response = chat(args.base_url, args.api_key, body, args.request_timeout, args.retries)
        transcript["turns"] = turn + 1
        message = response["choices"][0].get("message") or {}
        assistant: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
        if message.get("reasoning_content"):
            assistant["reasoning_content"] = message["reasoning_content"]
        tool_calls = message.get("tool_calls") or []
        if tool_calls:
            assistant["tool_calls"] = tool_calls
        messages.append(assistant)
        if not tool_calls:
            end_reason = "final_answer"
            break
        for call in tool_calls:
            fn = call.get("function") or {}
            started = time.monotonic()
            result, ok = run_tool(
                str(fn.get("name")), str(fn.get("arguments") or ""), workdir, args.bash_timeout
            )
            transcript["tool_calls"].append(
                {
                    "name": fn.get("name"),
                    "tool_call_id": call.get("id", ""),
                    "ok": ok,
                    "duration_s": round(time.monotonic() - started, 4),
                }
            )
            messages.append({"role": "tool", "tool_call_id": call.get("id", ""), "content": result})
    transcript["end_reason"] = end_reason
    transcript["messages"] = messages
    return transcript


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--api-key", default=os.environ.get("OPENAI_API_KEY", ""))
    parser.add_argument("--model", default="policy")
    parser.add_argument("--task", help="task text (or use --task-file)")
    parser.add_argument("--task-file")
    parser.add_argument("--workdir", default=".")
    parser.add_argument("--max-turns", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=0, help="0 = let the server decide")
    parser.add_argument("--bash-timeout", type=float, default=60.0)
    parser.add_argument("--request-timeout", type=float, default=600.0)
    parser.add_argument("--retries", type=int, default=3)
    parser.add_argument("--transcript", help="write the transcript JSON here")
    parser.add_argument(
        "--messages-file",
        help="conversation so far (JSON list of messages, or a transcript): resume it, "
        "appending the task as the next user message",
    )
    args = parser.parse_args(argv)
    if args.task_file:
        args.task = Path(args.task_file).read_text()
    if not args.task:
        parser.print_usage(sys.stderr)
        print("error: --task or --task-file is required", file=sys.stderr)
        return 64
    if args.messages_file:
        try:
            load_messages(args.messages_file)
        except (OSError, ValueError) as exc:
            print(f"error: --messages-file: {exc}", file=sys.stderr)
            return 64
    code = 0
    try:
        transcript = run_agent(args)
    except ModelAPIError as exc:
        transcript = {"harness": "reference", "end_reason": "model_error", "error": str(exc)}
        code = 2
    if args.transcript:
        Path(args.transcript).parent.mkdir(parents=True, exist_ok=True)
        Path(args.transcript).write_text(json.dumps(transcript, indent=1))
    print(
        json.dumps(
            {k: transcript.get(k) for k in ("end_reason", "turns", "error") if k in transcript}
        )
    )
    return code


if __name__ == "__main__":
    sys.exit(main())
