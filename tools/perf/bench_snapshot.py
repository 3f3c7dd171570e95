"""Seconds per rollout that verification on a snapshot of the agent's container adds.

A Harbor task (``FROM debian:bookworm-slim``, ``WORKDIR /app``) whose oracle writes a file
in ``/etc``, one in ``/root`` and one in the workspace, run ``--n`` times through the
``oracle`` harness (concurrency 1) with ``verify_on_snapshot`` on and off (the verifier
sees the workspace only), alternated. Reported: mean and max of the rollout's ``snapshot`` (recording
the state) and ``verify`` (fresh sandbox, restoring the state, the verifier) phases, and of
``total``.

The alternative, an image per rollout, is timed on the same state: ``podman create`` of
the task image, ``podman mount``, the state's archive extracted into it on the host,
``podman commit``, ``podman rmi`` (``podman commit`` of the agent's own sandbox is refused:
its writable root is an overlaid ``--rootfs``).

Run: ``uv run python tools/perf/bench_snapshot.py --n 5`` (about a minute).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import statistics
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from clawrl.bench import RolloutStatus, Task, build_task_image, load_task, run_rollouts
from clawrl.sandbox import Podman

SOLVE = "#!/bin/bash\necho hi > /etc/snapx.conf\necho k > /root/.snapx\necho a > /app/out\n"
TEST_SH = (
    "#!/bin/bash\n"
    "[ -f /etc/snapx.conf ] && [ -f /root/.snapx ] && echo 1 > /logs/verifier/reward.txt"
    " || echo 0 > /logs/verifier/reward.txt\n"
)


def make_task(root: Path) -> Task:
    for d in ("environment", "tests", "solution"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    (root / "tests" / "test.sh").write_text(TEST_SH)
    (root / "solution" / "solve.sh").write_text(SOLVE)
    (root / "instruction.md").write_text("x\n")
    (root / "task.toml").write_text('version = "1.0"\n[environment]\nallow_internet = false\n')
    return load_task(root)


def phases(tasks: dict[str, Task], n: int) -> dict[str, Any]:
    """``n`` oracle rollouts of each task, alternated (the host's load drifts)."""
    rows: dict[str, list[Any]] = {name: [] for name in tasks}
    for _ in range(n):
        for name, task in tasks.items():
            (r,) = asyncio.run(run_rollouts([task], ["oracle"], concurrency=1))
            assert r.status is RolloutStatus.OK, r.reason
            rows[name].append(r)
    out: dict[str, Any] = {}
    for name, results in rows.items():
        out[name] = {"reward": sorted({r.reward for r in results})}
        for key in ("snapshot", "verify", "total"):
            vals = [r.timing.get(key, 0.0) for r in results]
            out[name][key] = {"mean": round(statistics.mean(vals), 3), "max": round(max(vals), 3)}
    return out


def podman(*args: str) -> str:
    return subprocess.run(["podman", *args], capture_output=True, text=True, check=True).stdout


def image_route(image: str, n: int) -> dict[str, float]:
    """Seconds of create + mount + extract + commit + rmi, mean over ``n``."""
    times = []
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "state.tar"
        with tarfile.open(archive, "w", format=tarfile.GNU_FORMAT) as tar:
            for name, data in (("etc/snapx.conf", b"hi\n"), ("root/.snapx", b"k\n")):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        for i in range(n):
            t = time.monotonic()
            cid = podman("create", "--pull", "never", image, "true").strip()
            merged = podman("mount", cid).strip()
            with tarfile.open(archive) as tar:
                tar.extractall(merged, filter="tar")
            tag = f"localhost/clawrl-snapshot-bench:{i}"
            podman("commit", "-q", cid, tag)
            podman("rm", "-f", cid)
            podman("rmi", tag)
            times.append(time.monotonic() - t)
    return {"mean": round(statistics.mean(times), 3), "max": round(max(times), 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        task = make_task(Path(tmp) / "task")
        asyncio.run(run_rollouts([task], ["oracle"], concurrency=1))  # builds the image
        off = task.model_copy(
            update={"verifier": task.verifier.model_copy(update={"verify_on_snapshot": False})}
        )
        result = phases({"snapshot_on": task, "snapshot_off": off}, args.n)
        assert task.dockerfile is not None
        image = asyncio.run(build_task_image(task.dockerfile, task.dockerfile.parent, Podman()))
        result["image_route_extra"] = image_route(image.tag, args.n)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
