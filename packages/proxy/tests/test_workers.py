"""``proxy serve --workers 2`` (issue 21): sessions created through the one admin address are
spread over both workers and all listed, each session's calls land on its worker (its splice
memory holds: later calls extend the earlier ones), and each capture is one complete JSONL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from clawrl.proxy.workers import session_worker, worker_argv


def test_worker_argv_and_session_tags(tmp_path: Path) -> None:
    argv = [
        "--backend",
        "null",
        "--socket",
        "m",
        "--port=8",
        "--workers",
        "2",
        "--admin-socket",
        "a",
    ]
    out = worker_argv(argv, 1, tmp_path, "http://h")
    assert out[:2] == ["--backend", "null"] and "--workers" not in out and "--port=8" not in out
    assert out[out.index("--worker-index") + 1] == "1"
    assert session_worker("sabc-w1", 2) == 1 and session_worker("sabc-w7", 2) == 0
    assert session_worker(b"sabc", 2) == 0


@pytest.mark.slow
def test_two_workers_behind_one_address(tmp_path: Path) -> None:
    m, a, cap = tmp_path / "m.sock", tmp_path / "a.sock", tmp_path / "cap"
    cmd = [sys.executable, "-m", "clawrl.proxy.cli", "serve", "--backend", "null"]
    cmd += ["--socket", str(m), "--admin-socket", str(a), "--capture-dir", str(cap)]
    proc = subprocess.Popen([*cmd, "--workers", "2"], start_new_session=True)
    try:
        deadline = time.time() + 180
        while not (a.exists() and m.exists()):
            assert proc.poll() is None and time.time() < deadline, "the proxy did not start"
            time.sleep(0.1)
        admin = httpx.Client(transport=httpx.HTTPTransport(uds=str(a)), base_url="http://p")
        model = httpx.Client(transport=httpx.HTTPTransport(uds=str(m)), base_url="http://p")
        sessions = [admin.post("/sessions", json={"run_id": "w"}).json() for _ in range(4)]
        assert sorted(session_worker(s["session_id"], 2) for s in sessions) == [0, 0, 1, 1]
        listed = {s["session_id"] for s in admin.get("/sessions").json()["sessions"]}
        assert listed == {s["session_id"] for s in sessions}
        assert admin.get("/status").json()["sessions"] == 4
        for s in sessions:
            msgs = [{"role": "user", "content": "go"}]
            for _ in range(3):
                r = model.post(
                    f"/s/{s['session_id']}/v1/chat/completions",
                    headers={"authorization": "Bearer " + s["api_key"]},
                    json={"model": "m", "messages": msgs},
                )
                assert r.status_code == 200, r.text
                msgs += [r.json()["choices"][0]["message"], {"role": "user", "content": "more"}]
        for s in sessions:
            recs = admin.get(f"/sessions/{s['session_id']}/records").json()["records"]
            # the calls reached the worker holding the session's history: nothing diverged
            kinds = [r["prompt_relation"]["kind"] for r in recs]
            assert kinds[0] == "first" and set(kinds[1:]) <= {"extends", "spliced"}, kinds
            assert admin.post(f"/sessions/{s['session_id']}/close").status_code == 200
            lines = (cap / "w" / f"{s['session_id']}.jsonl").read_text().splitlines()
            assert [json.loads(x)["seq"] for x in lines] == [0, 1, 2]
        assert admin.post("/pause").status_code == 200 and admin.post("/resume").status_code == 200
        admin.close()
        model.close()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(60) == 0
    assert not m.exists() and not a.exists()
