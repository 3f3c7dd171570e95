"""Real SGLang behind a real sglang-router (slow): two CPU workers (the kit's tiny byte
model, float32) and ``sglang-router`` 0.3.2 from the SGLang environment, the proxy on
:class:`SGLangRouterBackend` in front (the ``manual`` policy; the kill test adds a
``round_robin`` router so that both workers surely run calls when one dies).

Shown: a weight sync reaches both workers (each reports the new version itself), calls
are served by each worker and record that worker and its version; the router's policy
(``manual``, keyed by the session id) keeps a conversation on one worker; a worker
SIGKILLed while calls run on both makes its calls end as ``error`` records (none
missing), is reported and removed from the router, and later calls and a weight sync go
on with the other worker.

All servers run niced in their own process groups and are always stopped.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import openai
import pytest
from clawrl.proxy import (
    SGLangCluster,
    SGLangRouterBackend,
    SGLangServer,
    launch_sglang_cluster,
    launch_sglang_router,
)
from clawrl.proxy.backends.base import GenerationRequest, GenerationResult, TokenDelta

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def cluster(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SGLangCluster]:
    # idempotent: installs SGLang and the router when missing (a no-op otherwise)
    out = subprocess.run(
        ["bash", str(REPO / "tools" / "sglang" / "install.sh")],
        check=True,
        timeout=1800,
        capture_output=True,
        text=True,
    )
    python = Path(out.stdout.strip().splitlines()[-1]) / "bin" / "python"
    logs = tmp_path_factory.mktemp("sglang-cluster")
    t0 = time.monotonic()
    c = launch_sglang_cluster(
        model_dir, 2, python=python, device="cpu", dtype="float32", log_dir=logs, niceness=10
    )
    print(f"\n[sglang-router] 2 workers + router up in {time.monotonic() - t0:.0f} s ({logs})")
    try:
        yield c
    finally:
        c.stop()
        assert not c.router.alive and not any(w.alive for w in c.workers)


def _weight_version(url: str) -> str:
    return str(httpx.get(f"{url}/model_info", timeout=10).json()["weight_version"])


def _ask(live: Any, admin: Any, text: str, **kw: Any) -> dict[str, Any]:
    """One chat call in a new session; its (only) record."""
    s = admin.create_session(run_id="router", task_id=text[:20], harness="openai-sdk")
    client = openai.OpenAI(
        base_url=s.openai_base_url, api_key=s.api_key, http_client=live.http_client(), max_retries=0
    )
    with contextlib.suppress(openai.APIError):  # the record says what happened
        client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": text}], temperature=0.0, **kw
        )
    (rec,) = admin.records(s.session_id)
    return dict(rec)


def _worker(rec: dict[str, Any]) -> str | None:
    return (rec.get("backend_extra") or {}).get("worker")


def test_weight_sync_reaches_both_workers_and_calls_name_their_worker(
    cluster: SGLangCluster,
    live_factory: Any,
    model_dir: Path,
    other_model_dir: Path,
) -> None:
    backend = SGLangRouterBackend(cluster.url)  # the workers come from the router's list
    live = live_factory(backend)
    with live.admin() as admin:
        assert admin.load_weights(str(model_dir), 1) == 1
        assert sorted(backend.live_worker_urls) == sorted(cluster.worker_urls)
        for url in cluster.worker_urls:  # each worker reports the version itself
            assert _weight_version(url) == f"1@{urlsplit(url).netloc}"
        v1 = [_ask(live, admin, f"Question {i}?", max_completion_tokens=8) for i in range(6)]
        assert admin.load_weights(str(other_model_dir), 2) == 2
        for url in cluster.worker_urls:
            assert _weight_version(url) == f"2@{urlsplit(url).netloc}"
        v2 = [_ask(live, admin, f"Question {i}?", max_completion_tokens=8) for i in range(6)]

        # a conversation under the manual policy (the session id is the routing key):
        # every turn on the first one's worker
        s = admin.create_session(run_id="router", task_id="sticky", harness="openai-sdk")
        client = openai.OpenAI(
            base_url=s.openai_base_url, api_key=s.api_key, http_client=live.http_client()
        )
        messages: list[Any] = [{"role": "user", "content": "Tell me about the sea. " * 8}]
        for turn in range(4):
            r = client.chat.completions.create(
                model="tiny", messages=messages, max_completion_tokens=8, temperature=0.0
            )
            messages += [
                {"role": "assistant", "content": r.choices[0].message.content or ""},
                {"role": "user", "content": f"And then {turn}?"},
            ]
        sticky = admin.records(s.session_id)

    for rec in v1 + v2:
        assert rec["finish_reason"] in ("stop", "length"), rec.get("error")
    assert [r["policy_version"] for r in v1] == [1] * 6
    assert [r["policy_version"] for r in v2] == [2] * 6
    # both workers served calls, and each call names one of them
    assert {_worker(r) for r in v1 + v2} == set(cluster.worker_urls)
    # other weights: the same prompts get other logprobs
    assert [r["completion_logprobs"] for r in v1] != [r["completion_logprobs"] for r in v2]
    assert len({_worker(r) for r in sticky}) == 1, [_worker(r) for r in sticky]
    assert [r["policy_version"] for r in sticky] == [2] * 4


class _Watched(SGLangRouterBackend):
    """The router backend, counting requests that have streamed a token (the test's signal
    that generations are running on the workers)."""

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        self.streaming: set[str] = set()
        self.lock = threading.Lock()

    async def generate(
        self, request: GenerationRequest
    ) -> AsyncIterator[TokenDelta | GenerationResult]:
        async for item in super().generate(request):
            if isinstance(item, TokenDelta):
                with self.lock:
                    self.streaming.add(request.request_id)
            yield item


def test_a_worker_killed_mid_step_gives_typed_errors_and_the_step_finishes(
    cluster: SGLangCluster, live_factory: Any, model_dir: Path, tmp_path: Path
) -> None:
    # a round-robin router of its own over the same workers: the calls alternate, so both
    # workers surely run some when one dies (it starts in seconds)
    router = launch_sglang_router(
        cluster.worker_urls,
        python=cluster.router.command[0],
        policy="round_robin",
        log_path=tmp_path / "router-rr.log",
        niceness=10,
    )
    try:
        _kill_one_mid_step(cluster, router, live_factory, model_dir)
    finally:
        router.stop()


def _kill_one_mid_step(
    cluster: SGLangCluster, router: SGLangServer, live_factory: Any, model_dir: Path
) -> None:
    backend = _Watched(router.url, cluster.worker_urls, extra_sampling_params={"ignore_eos": True})
    live = live_factory(backend)
    victim, survivor = cluster.workers[1], cluster.workers[0]
    n = 4
    with live.admin() as admin:
        assert admin.load_weights(str(model_dir), 3) == 3
        with ThreadPoolExecutor(n) as pool:
            futures = [
                pool.submit(_ask, live, admin, f"Write story {i}.", max_completion_tokens=400)
                for i in range(n)
            ]
            deadline = time.monotonic() + 600
            while len(backend.streaming) < n and time.monotonic() < deadline:
                time.sleep(0.2)
            assert len(backend.streaming) == n, "the generations never started"
            os.killpg(victim.process.pid, signal.SIGKILL)  # the worker dies mid-generation
            step = [f.result(timeout=900) for f in futures]

        # the dead worker is reported and routed around
        deadline = time.monotonic() + 30
        # marked dead first, then the router's DELETE is confirmed: wait for both (under
        # load the confirmation comes well after the mark)
        while time.monotonic() < deadline and not (
            victim.url not in backend.live_worker_urls
            and {w.url: w for w in backend.workers}[victim.url].removed_from_router
        ):
            time.sleep(0.5)
        status = {w.url: w for w in backend.workers}
        assert not status[victim.url].alive and status[victim.url].error
        assert status[victim.url].removed_from_router
        assert status[survivor.url].alive
        listed = httpx.get(f"{router.url}/workers", timeout=10).json()["workers"]
        assert [w["url"] for w in listed] == [survivor.url]

        after = [_ask(live, admin, f"After {i}.", max_completion_tokens=8) for i in range(3)]
        assert admin.load_weights(str(model_dir), 4) == 4
        synced = _ask(live, admin, "Synced.", max_completion_tokens=8)

    # every call of the step has its record: errors on the dead worker, the rest finished
    errors = [r for r in step if r["finish_reason"] == "error"]
    done = [r for r in step if r["finish_reason"] == "length"]
    assert len(errors) + len(done) == n, [r["finish_reason"] for r in step]
    assert errors and done, [(r["finish_reason"], _worker(r)) for r in step]
    for r in errors:
        assert r["error"] and _worker(r) in (victim.url, None)
        assert r["policy_version"] == 3
    for r in done:
        assert _worker(r) == survivor.url and len(r["completion_ids"]) == 400
        assert r["policy_version"] == 3
    assert all(r["finish_reason"] == "length" and _worker(r) == survivor.url for r in after)
    assert synced["policy_version"] == 4 and _worker(synced) == survivor.url
