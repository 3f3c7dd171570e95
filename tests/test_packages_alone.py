"""Each package installs alone (only the workspace packages it depends on, versions from
uv.lock) and runs its example; bench, the proxy, ise-synth, the sandbox and prefixtree pull
no torch (tools/check_packages_alone.sh)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.podman]

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("prefixtree", "sandbox", "proxy", "bench", "ise-synth", "rl-core")


@pytest.mark.skipif(shutil.which("uv") is None, reason="needs uv")
def test_every_package_installs_alone_and_runs_its_example() -> None:
    r = subprocess.run(
        ["bash", str(ROOT / "tools" / "check_packages_alone.sh")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1500,
        check=False,
    )
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    for package in PACKAGES:
        assert f"check_packages_alone: {package} ok" in r.stdout, r.stdout[-4000:]
