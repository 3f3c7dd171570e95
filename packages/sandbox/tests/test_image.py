"""``sandbox build-image``: a hermetic Debian image (debootstrap + podman import), cached.

Slow on the first run (debootstrap downloads from the Debian mirror: a few minutes); later runs
find the cached image and take well under a second.
"""

from __future__ import annotations

import time

import pytest
from clawrl.sandbox import Sandbox, SandboxSpec, build_image, image_tag

from .conftest import UnixHTTP


@pytest.mark.slow
async def test_build_image_and_run_sandbox_on_it(unix_http: UnixHTTP) -> None:
    tag = await build_image()  # default recipe: minbase + python3
    assert tag == image_tag()
    t0 = time.monotonic()
    assert await build_image() == tag  # cached: no rebuild
    assert time.monotonic() - t0 < 5
    spec = SandboxSpec(image=tag, model_socket=unix_http.path, files={"x.txt": "X"})
    async with await Sandbox.create(spec) as sb:
        r = await sb.exec(
            "cat /etc/debian_version; id -un; cat x.txt; echo; grep -c nameserver /etc/resolv.conf; "
            "getent passwd sandbox | cut -d: -f3",
            timeout=30,
        )
        lines = r.stdout.decode().split()
        assert lines[0].startswith("12.") and lines[1:] == ["root", "X", "0", "1000"], r
        r = await sb.exec(
            [
                "python3",
                "-c",
                "import urllib.request as u; print(u.urlopen('http://127.0.0.1:8000/img').read().decode())",
            ],
            timeout=30,
        )
        assert r.ok and r.stdout.startswith(b"hello /img"), r
        r = await sb.exec("python3 -c \"import socket; socket.getaddrinfo('deb.debian.org', 80)\"")
        assert not r.ok
