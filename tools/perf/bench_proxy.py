"""Benchmark what the proxy adds per model call, with the NullBackend benchmark fixture.

The proxy (``proxy serve --backend null``: every generation returns a fixed 64-token
completion at once) runs in its own process pinned to one CPU core, serving the Chat
Completions API on a unix socket with capture to JSONL enabled. Clients (a minimal asyncio
HTTP/1.1 keep-alive client over the socket, in this process on the other core(s)) send non-streamed requests whose prompt is
a system message plus a ~2,000-token user message that is new on every call (so rendering and
tokenization are always paid), 1 and 16 clients at once; every client starts a new session
every 50 calls (a rollout-sized conversation). Reported per case: latency percentiles, calls/s,
and the *added latency* = proxy p50 - p50 of calling ``NullBackend.generate`` directly
in-process (the backend's own cost).

Goals: added p50 <= 2 ms at 1 client; >= 300 calls/s on one core at 16 clients.

Run: ``uv run python tools/perf/bench_proxy.py`` (writes ``tools/perf/results/proxy.json``;
about a minute).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import signal
import statistics
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from clawrl.proxy import (
    AdminClient,
    ChatRenderer,
    GenerationRequest,
    SamplingParams,
    build_default_model,
)
from clawrl.proxy.testing import NullBackend

RESULTS = Path(__file__).parent / "results" / "proxy.json"
APPEND = False  # --append: each session's calls extend one conversation


def _cpu_s(pid: int) -> float:
    """user + system CPU seconds of a process (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _tree_cpu_s(root: int) -> float:
    """CPU seconds of ``root`` and every process of its session (the workers of
    ``--workers N``)."""
    total = 0.0
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == root:  # session id (the proxy is started in its own session)
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def _user_text(rng: random.Random, renderer: ChatRenderer, tokens: int) -> str:
    words = []
    n = 0
    while n < tokens:
        w = "".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))) + " "
        words.append(w)
        n += len(renderer.encode(w))
    return "".join(words)


async def direct_latency(renderer: ChatRenderer, completion: list[int], n: int) -> list[float]:
    backend = NullBackend(completion, vocab_size=renderer.vocab_size)
    prompt = renderer.encode("x" * 2000)
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        req = GenerationRequest(str(i), prompt, SamplingParams(max_tokens=64))
        async for _ in backend.generate(req):
            pass
        out.append(time.perf_counter() - t0)
    return out


async def run_clients(
    sock: str,
    admin_sock: str,
    renderer: ChatRenderer,
    clients: int,
    calls: int,
    prompt_tokens: int,
    pid: int,
) -> dict[str, Any]:
    rng = random.Random(clients)
    texts = [_user_text(rng, renderer, prompt_tokens) for _ in range(64)]
    lat: list[float] = []
    prompt_lens: list[int] = []
    admin = AdminClient(socket=admin_sock)

    async def one_client(k: int, n: int) -> None:
        # A minimal HTTP/1.1 keep-alive client over the unix socket: prebuilt request bytes,
        # Content-Length framed response. Far cheaper than a full client library, so the
        # figures measure the proxy rather than the load generator.
        reader, writer = await asyncio.open_unix_connection(sock)
        s = None
        conv: list[dict[str, Any]] = []
        last: dict[str, Any] = {}
        try:
            for i in range(n):
                if i % 50 == 0:
                    s = await asyncio.to_thread(admin.create_session, run_id="bench")
                assert s is not None
                text = f"{k}-{i} " + texts[(k * 7 + i) % len(texts)]
                if not APPEND or i % 50 == 0:
                    conv = [
                        {"role": "system", "content": "You are a benchmark."},
                        {"role": "user", "content": text},
                    ]
                else:  # the agent's last answer echoed, plus a new ~200-token observation
                    conv += [last, {"role": "user", "content": text[: len(text) // 10]}]
                body = json.dumps(
                    {"model": "m", "messages": conv, "max_completion_tokens": 64}
                ).encode()
                path = urlsplit(s.openai_base_url).path
                req = (
                    f"POST {path}/chat/completions HTTP/1.1\r\nhost: proxy\r\n"
                    f"authorization: Bearer {s.api_key}\r\ncontent-type: application/json\r\n"
                    f"content-length: {len(body)}\r\n\r\n"
                ).encode() + body
                t0 = time.perf_counter()
                writer.write(req)
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                data = await reader.readexactly(length)
                lat.append(time.perf_counter() - t0)
                if not head.startswith(b"HTTP/1.1 200"):
                    raise RuntimeError(head.decode() + data.decode())
                answer = json.loads(data)
                last = answer["choices"][0]["message"]
                u = answer["usage"]
                assert u["completion_tokens"] == 64, u
                prompt_lens.append(u["prompt_tokens"])
        finally:
            writer.close()

    # warm-up
    await one_client(999, 20)
    lat.clear()
    prompt_lens.clear()
    per = calls // clients
    cpu0 = _tree_cpu_s(pid)
    t0 = time.perf_counter()
    await asyncio.gather(*(one_client(k, per) for k in range(clients)))
    wall = time.perf_counter() - t0
    cpu = _tree_cpu_s(pid) - cpu0
    admin.close()
    return {
        "clients": clients,
        "calls": len(lat),
        "wall_s": wall,
        "calls_per_s": len(lat) / wall,
        "proxy_cpu_ms_per_call": 1e3 * cpu / len(lat),
        "calls_per_cpu_s": len(lat) / cpu if cpu > 0 else None,
        "latency_ms": {
            "p50": 1e3 * statistics.median(lat),
            "p90": 1e3 * _pct(lat, 0.9),
            "p99": 1e3 * _pct(lat, 0.99),
            "mean": 1e3 * statistics.fmean(lat),
        },
        "prompt_tokens_mean": statistics.fmean(prompt_lens),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer", choices=["byte", "qwen3"], default="byte")
    ap.add_argument("--prompt-tokens", type=int, default=2000)
    ap.add_argument("--calls", type=int, default=800, help="calls per case")
    ap.add_argument("--core", type=int, default=0, help="CPU core the proxy is pinned to")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--workers", type=int, default=1, help="proxy serve --workers N")
    ap.add_argument(
        "--append",
        action="store_true",
        help="an agent conversation: each call echoes the last answer and adds ~1/10 of a "
        "fresh message (a new session every 50 calls)",
    )
    args = ap.parse_args()
    global APPEND
    APPEND = args.append

    model_dir = build_default_model(args.tokenizer)
    renderer = ChatRenderer.from_model_dir(model_dir)
    completion = [*renderer.encode("a") * 63, renderer.stop_token_ids[0]]
    direct = asyncio.run(direct_latency(renderer, completion, 2000))
    direct_p50_ms = 1e3 * statistics.median(direct)

    tmp = Path(tempfile.mkdtemp(prefix="bench-proxy-", dir="/tmp"))
    sock, admin_sock = str(tmp / "m.sock"), str(tmp / "a.sock")
    cmd = [
        sys.executable,
        "-m",
        "clawrl.proxy.cli",
        "serve",
        "--model",
        str(model_dir),
        "--backend",
        "null",
        "--null-tokens",
        "64",
        "--socket",
        sock,
        "--admin-socket",
        admin_sock,
        "--capture-dir",
        str(tmp / "capture"),
        "--tokenizer",
        args.tokenizer,
        "--workers",
        str(args.workers),
    ]
    core = args.core if args.core in os.sched_getaffinity(0) else min(os.sched_getaffinity(0))
    pin = args.workers == 1  # several workers share every core with the clients
    proc = subprocess.Popen(
        cmd,
        preexec_fn=(lambda: os.sched_setaffinity(0, {core})) if pin else None,
        start_new_session=True,
    )
    others = os.sched_getaffinity(0) - {core}
    if others and pin:
        os.sched_setaffinity(0, others)
    try:
        deadline = time.time() + 120
        while not os.path.exists(admin_sock):
            if proc.poll() is not None or time.time() > deadline:
                raise SystemExit("the proxy did not start")
            time.sleep(0.1)
        cases = []
        for clients in (1, 16):
            c = asyncio.run(
                run_clients(
                    sock, admin_sock, renderer, clients, args.calls, args.prompt_tokens, proc.pid
                )
            )
            c["added_latency_p50_ms"] = c["latency_ms"]["p50"] - direct_p50_ms
            cases.append(c)
            print(
                f"{clients:>2} clients: p50 {c['latency_ms']['p50']:.2f} ms "
                f"(added {c['added_latency_p50_ms']:.2f} ms), p99 {c['latency_ms']['p99']:.2f} ms, "
                f"{c['calls_per_s']:.0f} calls/s; proxy CPU {c['proxy_cpu_ms_per_call']:.2f} ms/call"
            )
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    one, sixteen = cases
    result = {
        "benchmark": "proxy added latency and throughput (NullBackend fixture)",
        "command": " ".join(["uv run python tools/perf/bench_proxy.py", *sys.argv[1:]]),
        "machine": {
            "cpu_count": os.cpu_count(),
            "proxy_pinned_to_core": core,
            "python": platform.python_version(),
            "load_avg_at_start": os.getloadavg(),
        },
        "settings": {
            "tokenizer": args.tokenizer,
            "workers": args.workers,
            "conversation": "appending" if args.append else "fresh message per call",
            "prompt_tokens": args.prompt_tokens,
            "completion_tokens": 64,
            "calls_per_case": args.calls,
            "capture": "on (orjson JSONL)",
            "stream": False,
        },
        "direct_null_backend_p50_ms": direct_p50_ms,
        "cases": cases,
        "goals": {
            "added_latency_p50_ms": {
                "goal": 2.0,
                "measured": one["added_latency_p50_ms"],
                "met": one["added_latency_p50_ms"] <= 2.0,
            },
            "calls_per_s_one_core": {
                "goal": 300,
                "measured": sixteen["calls_per_s"],
                "met": sixteen["calls_per_s"] >= 300,
                "cpu_bound_estimate": sixteen["calls_per_cpu_s"],
            },
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
