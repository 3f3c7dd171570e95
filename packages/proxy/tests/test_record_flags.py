"""Record flags: ``side_path`` (a call that does not continue the session's main
conversation) and ``stale`` (weights changed while the call generated)."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx


def test_side_path_flag(inproc: Any) -> None:
    sid, h = inproc.session(["a", "b", "c"])
    main = [{"role": "system", "content": "main agent"}, {"role": "user", "content": "task"}]
    assert inproc.chat(sid, h, {"messages": main}).status_code == 200
    side = [
        {"role": "system", "content": "summarise the title"},
        {"role": "user", "content": "task"},
    ]
    assert inproc.chat(sid, h, {"messages": side}).status_code == 200
    cont = [*main, {"role": "assistant", "content": "a"}, {"role": "user", "content": "more"}]
    assert inproc.chat(sid, h, {"messages": cont}).status_code == 200
    flags = [r["flags"] for r in inproc.records(sid)]
    assert flags == [[], ["side_path"], []]


def test_stale_flag_when_weights_change_during_generation(
    live_factory: Any, model_dir: Any
) -> None:
    from clawrl.proxy.testing import ScriptedBackend

    backend = ScriptedBackend.from_model_dir(model_dir, token_delay_s=0.01)
    live = live_factory(backend)
    with live.admin() as admin:
        s = admin.create_session()
        admin.script(s.session_id, ["x" * 150])
        http = httpx.Client(transport=httpx.HTTPTransport(uds=live.socket), timeout=60)
        status: list[int] = []

        def call() -> None:
            r = http.post(
                f"http://x/s/{s.session_id}/v1/chat/completions",
                json={"messages": [{"role": "user", "content": "x"}]},
                headers={"authorization": f"Bearer {s.api_key}"},
            )
            status.append(r.status_code)

        t = threading.Thread(target=call)
        t.start()
        time.sleep(0.5)
        admin.load_weights(str(model_dir), 5)
        t.join(timeout=30)
        http.close()
        assert status == [200]
        (rec,) = admin.records(s.session_id)
    assert (rec["policy_version"], rec["policy_version_end"]) == (0, 5)
    assert rec["flags"] == ["stale"]
