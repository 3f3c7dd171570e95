"""Sandboxes on two podman hosts, on one machine standing in for two.

The "remote" host is a second ``podman system service`` with its own storage on its own
socket, reached with ``podman --url``. Its sandboxes reach the proxy through the documented
model path (packages/sandbox/README.md, "Sandboxes on several hosts"): the proxy's model socket
exposed on TCP by socat on the orchestrator's side, relayed by socat on the sandbox host into
a unix socket mounted into each sandbox; every call carries its session's key. Half of a
bench run's rollouts run there; the service is stopped mid-run: the run finishes, those
rollouts are infra-errors, the host is reported down, and no container is left on either
endpoint. The model is the ScriptedBackend (a test backend: predetermined completions).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from clawrl.bench import (
    RolloutOptions,
    RolloutRunner,
    RolloutSpec,
    RolloutStatus,
    load_builtin_suite,
    plan_rollouts,
)
from clawrl.bench.harness import oracle_completions
from clawrl.proxy import SessionInfo, build_default_model, format_assistant_text, serve
from clawrl.proxy.testing import ScriptedBackend
from clawrl.sandbox import SandboxHost, SandboxHostDownError, SandboxHosts
from clawrl.sandbox.podman import default_runtime

pytestmark = [
    pytest.mark.podman,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("socat") is None, reason="needs socat (tools/setup.sh)"),
]


class PodmanService:
    """A ``podman system service`` on its own storage and socket (a stand-in remote host)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.socket = root / "podman.sock"
        self.url = f"unix://{self.socket}"
        self.proc: subprocess.Popen[bytes] | None = None

    def storage_args(self) -> list[str]:
        rt = default_runtime()
        return [
            "--root",
            str(self.root / "storage"),
            "--runroot",
            str(self.root / "run"),
            *(["--runtime", rt] if rt else []),
        ]

    def start(self) -> None:
        argv = ["podman", *self.storage_args(), "system", "service", "--time=0", self.url]
        with open(self.root / "service.log", "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=log)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            r = subprocess.run(["podman", "--url", self.url, "info"], capture_output=True)
            if r.returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError(
            f"podman service did not answer: {(self.root / 'service.log').read_text()}"
        )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(30)
        self.proc = None

    def containers(self, run_id: str) -> list[str]:
        """Containers of ``run_id`` in this service's storage (read without the service)."""
        out = subprocess.run(
            [
                "podman",
                *self.storage_args(),
                *(
                    "ps",
                    "-a",
                    "--format",
                    "{{.Names}}",
                    "--filter",
                    f"label=clawrl.run_id={run_id}",
                ),
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return out.split()


@contextlib.contextmanager
def _spawned(argv: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with open(log, "ab") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=f)
    try:
        yield proc
    finally:
        proc.terminate()
        proc.wait(10)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _local_containers(run_id: str) -> list[str]:
    out = subprocess.run(
        [
            "podman",
            "ps",
            "-a",
            "--format",
            "{{.Names}}",
            "--filter",
            f"label=clawrl.run_id={run_id}",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.split()


def _processes_naming(root: Path) -> list[int]:
    """Pids whose command line names ``root`` (the second host's storage)."""
    needle, pids = str(root).encode(), []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            with contextlib.suppress(OSError):
                if needle in (proc / "cmdline").read_bytes():
                    pids.append(int(proc.name))
    return pids


def _kill_processes_naming(root: Path) -> None:
    for pid in _processes_naming(root):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while _processes_naming(root) and time.monotonic() < deadline:
        time.sleep(0.1)


@pytest.fixture
def remote_service() -> Iterator[PodmanService]:
    # short path: a unix socket path is limited to 108 bytes
    svc = PodmanService(Path(tempfile.mkdtemp(prefix="clawrl-pm2-", dir="/tmp")))
    svc.start()
    try:
        yield svc
    finally:
        svc.stop()
        subprocess.run(["podman", *svc.storage_args(), "rm", "-af", "-t", "0"], capture_output=True)
        # the exec sessions' conmon processes of the killed service outlive it (they held
        # the overlay mount busy, so each run left processes, a mount and the directory)
        _kill_processes_naming(svc.root)
        # podman bind-mounts its overlay directory onto itself: unmount before removing
        overlay = str(svc.root / "storage" / "overlay")
        if subprocess.run(["umount", overlay], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", overlay], capture_output=True)
        shutil.rmtree(svc.root, ignore_errors=True)
        assert not _processes_naming(svc.root), "processes of the second host outlived the test"


async def test_half_the_sandboxes_on_a_second_host_that_dies_mid_run(
    remote_service: PodmanService,
) -> None:
    t0 = time.monotonic()
    model_dir = Path(build_default_model("byte"))
    backend = ScriptedBackend.from_model_dir(model_dir)
    task = next(t for t in load_builtin_suite() if t.id == "csv_to_markdown")
    relay_dir = remote_service.root / "relay"
    relay_dir.mkdir()
    relay_sock, port = relay_dir / "model.sock", _free_port()

    async def script(session: SessionInfo, spec: RolloutSpec) -> None:
        wait = format_assistant_text(tool_calls=[("bash", {"command": "sleep 8"})])
        backend.script(session.session_id, [wait, *oracle_completions(spec.task)])

    async with serve(backend, model_dir) as endpoint:
        # orchestrator side: the model socket (never the admin socket) on TCP
        expose = ["socat", f"TCP-LISTEN:{port},bind=127.0.0.1,reuseaddr,fork"]
        expose.append(f"UNIX-CONNECT:{endpoint.model_socket}")
        # sandbox host side: TCP relayed into the socket its sandboxes mount
        relay = ["socat", "-d", "-d", f"UNIX-LISTEN:{relay_sock},fork,mode=666,unlink-early"]
        relay.append(f"TCP:127.0.0.1:{port}")
        relay_log = remote_service.root / "relay.log"
        with (
            _spawned(expose, remote_service.root / "expose.log"),
            _spawned(relay, relay_log),
        ):
            while not relay_sock.exists():
                await asyncio.sleep(0.05)
            hosts = SandboxHosts(
                [
                    SandboxHost("local", 2),
                    SandboxHost("remote", 2, url=remote_service.url, model_socket=relay_sock),
                ],
                probe_interval_s=0.5,
            )
            async with hosts:
                runner = RolloutRunner(
                    endpoint,
                    RolloutOptions(retries=0),
                    session_hook=script,
                    concurrency=4,
                    sandbox_hosts=hosts,
                )
                run = asyncio.ensure_future(runner.run(plan_rollouts([task], ["reference"], 4)))
                # both remote rollouts made their first model call through the relay
                deadline = time.monotonic() + 120
                while relay_log.read_text().count("accepting connection") < 2:
                    assert not run.done() and time.monotonic() < deadline, relay_log.read_text()
                    await asyncio.sleep(0.1)
                health = {h.name: h for h in hosts.health()}
                assert health["remote"].in_use == 2 and health["local"].in_use == 2
                remote_service.stop()  # the host disappears mid-run
                results = await asyncio.wait_for(run, 180)
                health = {h.name: h for h in hosts.health()}
                assert health["remote"].up is False and health["remote"].lost == 2
                assert health["remote"].reason and health["local"].up is True
                assert health["local"].in_use == 0
                with pytest.raises(SandboxHostDownError):
                    await hosts.podman("remote").run("ps")
                remote_service.start()  # it comes back: its stranded containers go
            # (hosts.close() reaped them)
    by_status: dict[RolloutStatus, list[str]] = {}
    for r in results:
        by_status.setdefault(r.status, []).append(r.reason)
    assert len(by_status.get(RolloutStatus.OK, [])) == 2, by_status
    assert all(r.reward == 1.0 for r in results if r.status is RolloutStatus.OK)
    infra = by_status.get(RolloutStatus.INFRA_ERROR, [])
    assert len(infra) == 2 and all("is down" in reason for reason in infra), by_status
    assert _local_containers(runner.run_id) == []
    assert remote_service.containers(runner.run_id) == []
    print(f"two-host run with failover: {time.monotonic() - t0:.1f} s")
