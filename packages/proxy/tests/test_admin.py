"""Admin API through the exported clients (sync and async) against a live proxy."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from clawrl.proxy import AdminClient, AsyncAdminClient, ProxyAdminError, ProxyError


def _chat(live: Any, s: Any, **kw: Any) -> httpx.Response:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **kw}
    return live.http_client().post(
        f"{s.openai_base_url}/chat/completions".replace("http://127.0.0.1:8000", "http://x"),
        json=body,
        headers={"authorization": f"Bearer {s.api_key}"},
    )


def test_sessions_records_and_close(live_factory: Any, scripted: Any) -> None:
    live = live_factory(scripted)
    with live.admin() as admin:
        s = admin.create_session(
            run_id="run-1", task_id="task-7", harness="pi", group_id="g3", metadata={"sample": 2}
        )
        assert s.openai_base_url == f"http://127.0.0.1:8000/s/{s.session_id}/v1"
        assert s.anthropic_base_url == f"http://127.0.0.1:8000/s/{s.session_id}"
        assert s.capture_path and s.capture_path.endswith(f"run-1/{s.session_id}.jsonl")
        tcp = admin.create_session(public_base_url="http://127.0.0.1:9999/")
        assert tcp.openai_base_url == f"http://127.0.0.1:9999/s/{tcp.session_id}/v1"
        with pytest.raises(ProxyAdminError):
            admin.create_session(public_base_url="ftp://x")
        with pytest.raises(TypeError, match="runid"):  # a misspelt option is not dropped
            admin.create_session(runid="run-1")  # type: ignore[call-arg]
        with pytest.raises(TypeError, match="temp"):
            admin.set_sampling(temp=0.5)  # type: ignore[call-arg]
        other = admin.create_session(run_id="run-1")
        assert other.session_id != s.session_id and other.api_key != s.api_key
        assert len(s.session_id) >= 32 and len(s.api_key) >= 40
        assert _chat(live, s).status_code == 200
        (rec,) = admin.records(s.session_id)
        assert rec["metadata"] == {
            "sample": 2,
            "run_id": "run-1",
            "task_id": "task-7",
            "harness": "pi",
            "group_id": "g3",
        }
        assert admin.session(s.session_id)["calls"] == 1
        admin.close_session(s.session_id)
        assert _chat(live, s).status_code == 410
        assert len(admin.records(s.session_id)) == 1  # records outlive the session
        with pytest.raises(ProxyAdminError) as e:
            admin.records("s" + "0" * 32)
        assert e.value.status == 404
        # the other session's key does not open this one
        r = _chat(live, type(s)(**{**s.__dict__, "session_id": other.session_id}))
        assert r.status_code in (401, 410)


def test_training_sampling_overrides_the_harness(live_factory: Any, scripted: Any) -> None:
    live = live_factory(scripted)
    with live.admin() as admin:
        s = admin.create_session()
        assert _chat(live, s, temperature=0.2, top_p=0.5, max_tokens=7).status_code == 200
        admin.set_sampling(temperature=0.7, top_p=1.0, max_tokens=100)
        assert admin.status()["training_sampling"]["temperature"] == 0.7
        assert _chat(live, s, temperature=0.2, top_p=0.5, max_tokens=10**9).status_code == 200
        assert _chat(live, s, temperature=0.2).status_code == 200
        admin.clear_sampling()
        assert _chat(live, s, max_tokens=10**9).status_code == 200
        recs = admin.records(s.session_id)
    ev, tr, tr2, ev2 = (r["sampling"] for r in recs)
    assert (ev["mode"], ev["temperature"], ev["top_p"], ev["max_tokens"]) == ("eval", 0.2, 0.5, 7)
    assert (tr["mode"], tr["temperature"], tr["top_p"], tr["max_tokens"]) == (
        "training",
        0.7,
        1.0,
        100,
    )
    assert tr["requested"] == {"temperature": 0.2, "top_p": 0.5, "top_k": None, "max_tokens": 10**9}
    assert tr2["temperature"] == 0.7
    # no cap from anyone: clamped to the context window left after the prompt
    assert ev2["max_tokens"] == scripted.max_context - len(recs[3]["prompt_ids"])


def test_pause_holds_generation_until_resume(live_factory: Any, scripted: Any) -> None:
    live = live_factory(scripted)
    with live.admin() as admin:
        s = admin.create_session()
        admin.pause()
        assert admin.status()["paused"] is True
        done: list[int] = []
        t = threading.Thread(target=lambda: done.append(_chat(live, s).status_code))
        t.start()
        time.sleep(0.5)
        assert not done
        admin.resume()
        t.join(timeout=10)
        assert done == [200]
        (rec,) = admin.records(s.session_id)
        assert rec["timing"]["started"] - rec["timing"]["received"] >= 0.1


def test_load_weights_changes_policy_version(
    live_factory: Any, scripted: Any, model_dir: Any
) -> None:
    live = live_factory(scripted)
    with live.admin() as admin:
        s = admin.create_session()
        assert _chat(live, s).status_code == 200
        assert admin.load_weights(str(model_dir), 3) == 3
        assert _chat(live, s).status_code == 200
        v = [r["policy_version"] for r in admin.records(s.session_id)]
        assert v == [0, 3]
        with pytest.raises(ProxyAdminError) as e:
            admin.load_weights(str(model_dir), -1)
        assert e.value.status == 400


async def test_async_client(live_factory: Any, scripted: Any) -> None:
    live = live_factory(scripted)
    async with AsyncAdminClient(socket=live.config.admin_socket) as admin:
        s = await admin.create_session(run_id="a", harness="h")
        assert await admin.script(s.session_id, ["hello"]) == 1
        await admin.pause()
        await admin.resume()
        await admin.set_sampling(temperature=0.5)
        await admin.clear_sampling()
        assert (await admin.status())["sessions"] == 1
        assert await admin.records(s.session_id) == []
        await admin.close_session(s.session_id)
        assert (await admin.session(s.session_id))["closed"] is True


def test_admin_token_and_tcp(live_factory: Any, scripted: Any) -> None:
    import socket as so

    ports = []
    for _ in range(2):
        with so.socket() as sk:
            sk.bind(("127.0.0.1", 0))
            ports.append(sk.getsockname()[1])
    live = live_factory(scripted, admin_token="secret", admin_port=ports[0], port=ports[1])
    with AdminClient(base_url=f"http://127.0.0.1:{ports[0]}", token="secret") as admin:
        s = admin.create_session(public_base_url=f"http://127.0.0.1:{ports[1]}")
    with (
        AdminClient(base_url=f"http://127.0.0.1:{ports[0]}", token=s.api_key) as bad,
        pytest.raises(ProxyAdminError) as e,
    ):
        bad.create_session()
    assert e.value.status == 401
    # the model API on TCP, with the SDK's own HTTP client
    import openai

    with openai.OpenAI(base_url=s.openai_base_url, api_key=s.api_key) as client:
        r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert r.choices[0].message.content == "Done."
    assert live.server.started.is_set()


async def test_unreachable_proxy_is_a_typed_admin_error(tmp_path: Path) -> None:
    """A dead socket (or a dropped connection) is a ProxyAdminError with status 0, not a
    raw httpx exception that callers catching ProxyError would miss."""
    dead = str(tmp_path / "no-proxy.sock")
    async with AsyncAdminClient(socket=dead) as client:
        with pytest.raises(ProxyError) as info:
            await client.close_session("s-1")
    assert isinstance(info.value, ProxyAdminError) and info.value.status == 0
    assert "POST /sessions/s-1/close" in str(info.value)
    # the discard port: connection refused
    with (
        AdminClient(base_url="http://127.0.0.1:9") as sync_client,
        pytest.raises(ProxyAdminError, match="unreachable"),
    ):
        sync_client.records("s-1")


@pytest.mark.parametrize("abandoned", [False, True], ids=["finishing", "stuck"])
def test_close_returns_once_every_call_is_committed(
    live_factory: Any, model_dir: Path, abandoned: bool
) -> None:
    """A call in flight when the session is closed: close waits until its record is
    written (the call finishing in time, or, stuck, aborted after the grace period), so
    the records read after close are final and nothing is appended later (what the trainer's
    settle loop used to poll for). Revert tried: close without waiting -> the record is
    missing right after close and appears later."""
    from clawrl.proxy.testing import ScriptedBackend

    delay = 0.05 if not abandoned else 1.0  # 41 tokens: ~2 s, or ~41 s (> the 5 s grace)
    backend = ScriptedBackend.from_model_dir(model_dir, token_delay_s=delay)
    live = live_factory(backend)
    with live.admin() as admin:
        s = admin.create_session(run_id="close")
        backend.script(s.session_id, ["x" * 40])
        t = threading.Thread(target=lambda: _chat(live, s, stream=True))
        t.start()
        time.sleep(0.5)  # the call is in flight
        t0 = time.monotonic()
        closed = admin.close_session(s.session_id)
        waited = time.monotonic() - t0
        assert closed["closed"] is True and closed["uncommitted"] == []
        (rec,) = admin.records(s.session_id)
        assert rec["finish_reason"] == ("aborted" if abandoned else "stop"), rec["finish_reason"]
        assert (waited > 4.0) is abandoned and waited < 20.0
        t.join(60)
        time.sleep(0.3)
        assert len(admin.records(s.session_id)) == 1
