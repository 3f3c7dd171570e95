"""launch_sglang against a *fake* ``sglang.launch_server`` module (a test double: a tiny
HTTP server that answers /health and forks a child, as SGLang forks its scheduler).
The real SGLang start is covered by test_sglang_real.py (slow)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from clawrl.proxy import sglang_launcher
from clawrl.proxy.sglang_launcher import CPU_ARGS, SGLangLaunchError, launch_sglang

FAKE_LAUNCH_SERVER = r'''
"""Fake sglang.launch_server (test double)."""
import http.server, json, os, subprocess, sys, time

args = sys.argv[1:]
port = int(args[args.index("--port") + 1])
out = os.environ["FAKE_SGLANG_OUT"]
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
with open(out, "w") as f:
    json.dump({"argv": args, "pid": os.getpid(), "child": child.pid,
               "cpu_engine": os.environ.get("SGLANG_USE_CPU_ENGINE"),
               "ld": os.environ.get("LD_LIBRARY_PATH", ""),
               "extra": os.environ.get("FAKE_EXTRA")}, f)
mode = os.environ.get("FAKE_MODE", "ok")
print("fake sglang starting", flush=True)
if mode == "exit":
    print("fatal: something broke", flush=True)
    sys.exit(3)
time.sleep(float(os.environ.get("FAKE_DELAY", "0")))

class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if mode == "ok" else 503)
        self.end_headers()
    def log_message(self, *a):
        pass

http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
'''


@pytest.fixture
def fake_env(tmp_path: Path) -> dict[str, object]:
    pkg = tmp_path / "fakepath" / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text(FAKE_LAUNCH_SERVER)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    return {
        "model": model,
        "out": tmp_path / "fake.json",
        "env": {"PYTHONPATH": str(pkg.parent), "FAKE_SGLANG_OUT": str(tmp_path / "fake.json")},
        "log": tmp_path / "sglang.log",
    }


def _gone(pid: int) -> bool:
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # a zombie child of an exited parent is reaped by init; wait a little
        time.sleep(0.05)
    return False


def test_launch_waits_for_health_and_stop_kills_the_process_group(fake_env: dict) -> None:
    server = launch_sglang(
        fake_env["model"],
        python=sys.executable,
        device="cpu",
        extra_args=["--dtype", "float32"],
        env={**fake_env["env"], "FAKE_DELAY": "1.0", "FAKE_EXTRA": "x"},
        log_path=fake_env["log"],
        progress=False,
    )
    info = json.loads(Path(fake_env["out"]).read_text())
    try:
        assert server.startup_s >= 1.0
        assert httpx.get(f"{server.url}/health").status_code == 200
        argv = info["argv"]
        assert argv[argv.index("--model-path") + 1] == str(Path(fake_env["model"]).resolve())
        joined = " ".join(argv)
        assert " ".join(CPU_ARGS) in joined
        assert "--skip-tokenizer-init" in argv
        assert argv[-2:] == ["--dtype", "float32"]  # extra args come last
        assert info["cpu_engine"] == "1" and info["extra"] == "x"
        assert "fake sglang starting" in server.log_tail()
    finally:
        server.stop()
    assert not server.alive
    assert _gone(info["pid"]) and _gone(info["child"]), "the forked child must die too"
    server.stop()  # idempotent


def test_exit_during_startup_raises_with_log_tail(fake_env: dict) -> None:
    with pytest.raises(SGLangLaunchError, match="something broke"):
        launch_sglang(
            fake_env["model"],
            python=sys.executable,
            device="cpu",
            env={**fake_env["env"], "FAKE_MODE": "exit"},
            progress=False,
        )
    info = json.loads(Path(fake_env["out"]).read_text())
    assert _gone(info["child"])


def test_startup_timeout_kills_the_server(fake_env: dict) -> None:
    t0 = time.monotonic()
    with pytest.raises(SGLangLaunchError, match="not healthy"):
        launch_sglang(
            fake_env["model"],
            python=sys.executable,
            device="cpu",
            env={**fake_env["env"], "FAKE_MODE": "unhealthy"},
            startup_timeout_s=2.0,
            progress=True,
        )
    assert time.monotonic() - t0 < 60
    info = json.loads(Path(fake_env["out"]).read_text())
    assert _gone(info["pid"]) and _gone(info["child"])


def test_context_manager_stops(fake_env: dict) -> None:
    with launch_sglang(
        fake_env["model"], python=sys.executable, device="cpu", env=fake_env["env"], progress=False
    ) as server:
        assert server.alive
    assert not server.alive


def test_missing_interpreter_or_model(tmp_path: Path, fake_env: dict) -> None:
    with pytest.raises(SGLangLaunchError, match=r"install\.sh"):
        launch_sglang(fake_env["model"], python=tmp_path / "nope" / "python", progress=False)
    with pytest.raises(FileNotFoundError):
        launch_sglang(tmp_path / "no-model", python=sys.executable, progress=False)


def test_server_dies_with_a_killed_parent(fake_env: dict) -> None:
    """SIGKILL of the process that launched the server (a killed CI job) still ends it."""
    script = (
        "import sys, time\n"
        "from clawrl.proxy.sglang_launcher import launch_sglang\n"
        f"launch_sglang({str(fake_env['model'])!r}, python=sys.executable, device='cpu',\n"
        f"              env={fake_env['env']!r}, progress=False)\n"
        "print('up', flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    try:
        assert parent.stdout is not None
        assert parent.stdout.readline() == b"up\n"
        info = json.loads(Path(fake_env["out"]).read_text())
        parent.kill()
        parent.wait(timeout=30)
        assert _gone(info["pid"])
    finally:
        parent.kill()
        parent.wait(timeout=30)
        if parent.stdout is not None:
            parent.stdout.close()
        with contextlib.suppress(ProcessLookupError, NameError):
            os.killpg(info["pid"], signal.SIGKILL)  # the fake's own child


def test_free_port_is_below_the_ephemeral_range_and_free() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = {sglang_launcher._free_port("127.0.0.1") for _ in range(50)}
    assert len(ports) > 40, "drawn at random, not the same port each time"
    for port in ports:
        assert sglang_launcher.PORT_RANGE[0] <= port <= min(sglang_launcher.PORT_RANGE[1], low)
    # a port in use is never drawn: hold 60 of a 65-port range
    top = min(sglang_launcher.PORT_RANGE[1], low - 1)
    base = min(min(ports), top - 64)
    held = [socket.socket() for _ in range(60)]
    try:
        for s, port in zip(held, range(base, base + 60), strict=True):
            with contextlib.suppress(OSError):  # already taken elsewhere: as good
                s.bind(("127.0.0.1", port))
                s.listen()
        busy = {s.getsockname()[1] for s in held if s.getsockname()[1]}
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(sglang_launcher, "PORT_RANGE", (base, base + 64))
            drawn = [sglang_launcher._free_port("127.0.0.1") for _ in range(20)]
        assert not busy & set(drawn)
        assert all(base <= p <= base + 64 for p in drawn)
    finally:
        for s in held:
            s.close()


def test_a_lost_port_is_chosen_again(fake_env: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process binds the port between the launcher's choice and the server's bind
    (the CI flake of 2026-12-04: a worker exited with uvicorn's status 3): the server is
    started again on a new port, and the first start's log is kept."""
    with socket.socket() as thief:
        thief.bind(("127.0.0.1", 0))
        thief.listen()
        stolen = thief.getsockname()[1]
        real = sglang_launcher._free_port
        draws = iter([stolen])
        monkeypatch.setattr(sglang_launcher, "_free_port", lambda h: next(draws, None) or real(h))
        server = launch_sglang(
            fake_env["model"],
            python=sys.executable,
            device="cpu",
            env=fake_env["env"],
            log_path=fake_env["log"],
            progress=False,
        )
    try:
        assert server.url != f"http://127.0.0.1:{stolen}"
        assert httpx.get(f"{server.url}/health").status_code == 200
        log = Path(fake_env["log"]).read_text()
        assert "Address already in use" in log and log.count("fake sglang starting") == 2
        assert not server.lost_port
    finally:
        server.stop()


def test_a_taken_port_given_by_the_caller_is_an_error(fake_env: dict) -> None:
    """No retry on a port the caller chose: the error names the bind failure."""
    with socket.socket() as thief:
        thief.bind(("127.0.0.1", 0))
        thief.listen()
        port = thief.getsockname()[1]
        with pytest.raises(SGLangLaunchError, match="Address already in use"):
            launch_sglang(
                fake_env["model"],
                python=sys.executable,
                device="cpu",
                port=port,
                env=fake_env["env"],
                progress=False,
            )
