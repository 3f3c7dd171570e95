"""The LLM renderer through a real OpenAI-compatible server: clawrl's proxy (``proxy serve``)
with its scripted backend, which returns predetermined completions (a test backend, named as
such), so the intent texts are known while the HTTP, SSE-free Chat Completions path, chat
template, reasoning parsing and call records are all real."""

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from clawrl.ise_synth import IntentSampler, LLMRenderer, generate_intents, load_taxonomy


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def proxy_server(tmp_path: Path) -> Iterator[tuple[int, int]]:
    port, admin = _free_port(), _free_port()
    cmd = [sys.executable, "-c", "import sys; from clawrl.proxy.cli import main; sys.exit(main())",
           "serve", "--model", "default", "--backend", "scripted", "--port", str(port),
           "--admin-port", str(admin), "--capture-dir", str(tmp_path / "capture")]  # fmt: skip
    log = (tmp_path / "proxy.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 240
        while True:
            if proc.poll() is not None:
                pytest.fail(f"proxy exited: {(tmp_path / 'proxy.log').read_text()[-2000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("proxy did not start")
            time.sleep(0.5)
        yield port, admin
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.mark.slow
def test_llm_renderer_through_the_proxy(proxy_server: tuple[int, int], tmp_path: Path) -> None:
    from clawrl.proxy import AdminClient, format_assistant_text

    _, admin_port = proxy_server
    wanted = [f"Please merge my {k} CSV exports into one file and check for duplicates."
              for k in ("two", "three", "four")]  # fmt: skip
    with AdminClient(base_url=f"http://127.0.0.1:{admin_port}") as admin:
        s = admin.create_session(run_id="ise", task_id="intents", harness="ise-llm-renderer",
                                 group_id="g0")  # fmt: skip
        admin.script(s.session_id, [format_assistant_text(reasoning="Write as the user.",
                                                          content=w) for w in wanted])  # fmt: skip
        renderer = LLMRenderer("tiny", base_url=s.openai_base_url, api_key=s.api_key,
                               max_tokens=200, max_retries=0)  # fmt: skip
        records, failures = generate_intents(
            IntentSampler(load_taxonomy(), seed=0), 3, renderer,
            raw_path=tmp_path / "raw.jsonl", concurrency=1,
        )  # fmt: skip
        assert failures == 0
        assert [r.intent for r in records] == wanted  # reasoning went to reasoning_content
        assert {r.renderer for r in records} == {"llm:tiny"}
        calls = admin.records(s.session_id)
    assert len(calls) == 3
    assert all(c["completion_ids"] and c["prompt_ids"] for c in calls)
