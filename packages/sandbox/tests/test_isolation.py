"""Isolation against real podman: network, the model socket + forwarder, host files, host env."""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from clawrl.sandbox import MODEL_SOCKET_PATH, Sandbox, SandboxSpec
from clawrl.sandbox.sandbox import FORWARDER_SOURCE

from .conftest import UnixHTTP

pytestmark = pytest.mark.asyncio(loop_scope="module")

CANARY = "CLAWRL_TEST_CANARY_SECRET"


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def sandbox(unix_http: UnixHTTP) -> AsyncIterator[Sandbox]:
    os.environ[CANARY] = "do-not-leak-4711"
    try:
        async with await Sandbox.create(SandboxSpec(model_socket=unix_http.path)) as sb:
            yield sb
    finally:
        os.environ.pop(CANARY, None)


class Listener:
    """A TCP listener on the host that records every connection it accepts."""

    def __init__(self, host: str) -> None:
        self.sock = socket.create_server((host, 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = False
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop = True
        self._t.join()
        self.sock.close()


def host_ip() -> str:
    """This host's primary non-loopback IPv4 address (the one its default route uses)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("192.0.2.1", 9))  # no packet is sent for a UDP connect
        ip = s.getsockname()[0]
    finally:
        s.close()
    assert not ip.startswith("127."), ip
    return ip


@pytest.fixture(scope="module")
def listeners() -> Iterator[tuple[Listener, Listener]]:
    lo, anyaddr = Listener("127.0.0.1"), Listener("0.0.0.0")
    yield lo, anyaddr
    lo.close()
    anyaddr.close()


CONNECT = (
    'python3 -c "import socket, sys\n'
    "s = socket.socket(); s.settimeout(3)\n"
    "try:\n"
    "    s.connect((sys.argv[1], int(sys.argv[2]))); print('CONNECTED')\n"
    "except OSError as e:\n"
    "    print('FAILED', e); sys.exit(1)\" {host} {port}"
)


async def test_dns_fails(sandbox: Sandbox) -> None:
    r = await sandbox.exec(
        "python3 -c \"import socket; socket.getaddrinfo('deb.debian.org', 80); print('RESOLVED')\"",
        timeout=30,
    )
    assert not r.ok and b"RESOLVED" not in r.stdout and b"gaierror" in r.stderr, r
    r = await sandbox.exec("getent hosts pypi.org", timeout=30)
    assert not r.ok and r.stdout == b""


async def test_tcp_to_host_loopback_fails(
    sandbox: Sandbox, listeners: tuple[Listener, Listener]
) -> None:
    lo, _ = listeners
    probe = socket.create_connection(("127.0.0.1", lo.port), timeout=3)  # reachable from the host
    probe.close()
    time.sleep(0.3)
    before = lo.accepted
    assert before >= 1
    r = await sandbox.exec(CONNECT.format(host="127.0.0.1", port=lo.port), timeout=30)
    assert not r.ok and b"CONNECTED" not in r.stdout, r
    assert lo.accepted == before


async def test_tcp_to_host_address_fails(
    sandbox: Sandbox, listeners: tuple[Listener, Listener]
) -> None:
    _, anyaddr = listeners
    ip = host_ip()
    probe = socket.create_connection((ip, anyaddr.port), timeout=3)
    probe.close()
    time.sleep(0.3)
    before = anyaddr.accepted
    r = await sandbox.exec(CONNECT.format(host=ip, port=anyaddr.port), timeout=30)
    assert not r.ok and b"CONNECTED" not in r.stdout, r
    assert b"unreachable" in r.stdout.lower(), r.stdout
    assert anyaddr.accepted == before


CLIENT = r"""
import http.client, threading, time, json
out = {}
c = http.client.HTTPConnection("127.0.0.1", 8000, timeout=20)
c.request("GET", "/hello/1"); out["a"] = c.getresponse().read().decode()
c.request("POST", "/echo", body=b"abc"); out["b"] = c.getresponse().read().decode()
c.request("GET", "/stream"); r = c.getresponse()
times, data = [], b""
while True:
    piece = r.read1(65536) if hasattr(r, "read1") else r.read(16)
    if not piece:
        break
    times.append(time.monotonic()); data += piece
out["stream"] = data.decode(); out["stream_spread"] = times[-1] - times[0]
def slow(i, res):
    cc = http.client.HTTPConnection("127.0.0.1", 8000, timeout=20)
    cc.request("GET", "/slow/%d" % i); res[i] = cc.getresponse().read().decode()
res = {}
t0 = time.monotonic()
ts = [threading.Thread(target=slow, args=(i, res)) for i in range(8)]
[t.start() for t in ts]; [t.join() for t in ts]
out["slow"] = sorted(res.values()); out["slow_s"] = time.monotonic() - t0
print(json.dumps(out))
"""


async def test_http_through_socket_and_forwarder(sandbox: Sandbox, unix_http: UnixHTTP) -> None:
    import json

    r = await sandbox.exec(["test", "-S", MODEL_SOCKET_PATH])
    assert r.ok
    assert sandbox.model_base_url == "http://127.0.0.1:8000"
    r = await sandbox.exec(["python3", "-c", CLIENT], timeout=60)
    assert r.ok, r
    out = json.loads(r.stdout)
    conn_a = int(out["a"].rsplit("conn=", 1)[1])
    assert out["a"] == f"hello /hello/1 conn={conn_a}"
    assert out["b"] == "cba"
    # keep-alive: the three requests of the first client connection arrived on one connection
    assert [p for c, p in unix_http.requests if c == conn_a] == ["/hello/1", "/echo", "/stream"]
    assert out["stream"].count("data:") == 4 and out["stream_spread"] > 0.6  # streamed
    assert out["slow"] == ["slow"] * 8 and out["slow_s"] < 2.5  # 8 x 0.5 s concurrently


async def test_host_paths_invisible(sandbox: Sandbox) -> None:
    checkout = Path(__file__).resolve().parents[3]
    paths = [
        "/work",
        "/home/" + os.environ.get("USER", "root"),
        str(checkout),
        str(Path.home() / ".cache"),
        "/etc/shadow",
        "/var/lib/containers",
        "/root/.pyenv",
        str(FORWARDER_SOURCE),
        sys.prefix,
    ]
    r = await sandbox.exec(
        [
            "/bin/sh",
            "-c",
            'for p in "$@"; do test -e "$p" && echo "VISIBLE $p"; done; '
            "ls -A /root; ls -A /home; cat /etc/resolv.conf /etc/hosts",
            "sh",
            *paths,
        ]
    )
    assert b"VISIBLE" not in r.stdout, r.stdout
    listing = r.stdout.decode()
    assert "nameserver" not in listing and "sandbox\n" in listing
    assert (await sandbox.exec("ls /")).stdout.split() == [
        b"bin",
        b"dev",
        b"etc",
        b"home",
        b"lib",
        b"lib64",
        b"opt",
        b"proc",
        b"root",
        b"run",
        b"sbin",
        b"sys",
        b"tmp",
        b"usr",
        b"var",
        b"workspace",
    ]
    host_etc_only = {p.name for p in Path("/etc").iterdir()} - {
        "passwd",
        "group",
        "hosts",
        "hostname",
        "nsswitch.conf",
        "resolv.conf",
        "shells",
        "os-release",
        "mtab",
        "ld.so.cache",
        "alternatives",
    }
    r = await sandbox.exec("ls -A /etc")
    assert not (set(r.stdout.decode().split()) & host_etc_only)
    r = await sandbox.exec("touch /usr/x /etc/x 2>&1; echo done")
    assert r.stdout.count(b"Read-only file system") == 2


async def test_no_host_env_leaks(sandbox: Sandbox) -> None:
    assert os.environ.get(CANARY)
    r = await sandbox.exec("env")
    env = dict(line.split("=", 1) for line in r.stdout.decode().splitlines() if "=" in line)
    assert CANARY not in env
    assert set(env) <= {
        "PATH",
        "HOME",
        "LANG",
        "TERM",
        "HOSTNAME",
        "PWD",
        "SHLVL",
        "_",
        "container",
        "CLAWRL_EXEC_ID",
    }, set(env)
    secrets = {
        v
        for k, v in os.environ.items()
        if len(v) >= 8 and k not in ("PATH", "HOME", "LANG", "TERM")
    }
    assert not secrets & set(env.values())
