"""fix_malloc_thresholds: applied on Linux/glibc, the user's environment wins, bad values
are refused. Run in subprocesses: mallopt changes the whole process."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from clawrl.rl_core.malloc import fix_malloc_thresholds

_PROBE = """
import sys
from clawrl.rl_core.malloc import fix_malloc_thresholds
print(fix_malloc_thresholds())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_applied_unless_the_user_set_it() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, "fix"], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split()[0] == "True"
    mine = {**env, "MALLOC_MMAP_THRESHOLD_": "131072"}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, "fix"], env=mine, capture_output=True, text=True, check=True
    )
    assert out.stdout.split()[0] == "False"


def test_bad_threshold() -> None:
    with pytest.raises(ValueError, match="threshold_bytes"):
        fix_malloc_thresholds(-1)
    with pytest.raises(ValueError, match="threshold_bytes"):
        fix_malloc_thresholds(64 << 20)
