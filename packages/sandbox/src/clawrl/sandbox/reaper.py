"""Container labels, run ownership, and the reaper that removes containers of dead runs
(and, by :func:`gc_tempdirs`, the host temporary directories of dead processes).

Every sandbox container carries these labels:

===========================  ==============================================================
``clawrl.sandbox``           ``"1"`` — marks the container as ours (the reaper sees only these)
``clawrl.run_id``            the run (orchestrator) that created it
``clawrl.owner_pid``         the orchestrator's process id
``clawrl.owner_start``       that process's start time (clock ticks since boot, ``/proc``)
``clawrl.boot_id``           the host's boot id (``/proc/sys/kernel/random/boot_id``)
``clawrl.owner_host``        the orchestrator's host name
``clawrl.created``           creation time, unix seconds
===========================  ==============================================================

A run is *dead* when, on this host, its boot id differs from the current one (the machine
rebooted) or no process with its pid and start time exists (the orchestrator exited or was
killed; comparing the start time guards against pid reuse). Containers of other hosts are
never judged (their owner may be alive there) unless ``include_foreign=True``.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import socket
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import orjson

from .podman import Podman, shared_podman

__all__ = [
    "LABEL_PREFIX",
    "ContainerInfo",
    "RunIdentity",
    "current_identity",
    "gc",
    "gc_tempdirs",
    "list_containers",
    "owned_tempdir",
]

LABEL_PREFIX = "clawrl."
L_MARK = "clawrl.sandbox"
L_RUN = "clawrl.run_id"
L_PID = "clawrl.owner_pid"
L_START = "clawrl.owner_start"
L_BOOT = "clawrl.boot_id"
L_HOST = "clawrl.owner_host"
L_CREATED = "clawrl.created"


def boot_id() -> str:
    """This host's boot id (changes on every reboot)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def process_start_ticks(pid: int) -> int | None:
    """Start time of process ``pid`` in clock ticks since boot, or None if there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        return int(fields[19])  # field 22 of proc(5); fields[0] is field 3
    except (IndexError, ValueError):
        return None


@dataclass(frozen=True)
class RunIdentity:
    """Who owns a sandbox: a run id plus the owner process's pid, start time, boot id, host."""

    run_id: str
    pid: int
    start_ticks: int
    boot_id: str
    host: str

    def labels(self) -> dict[str, str]:
        """Container labels for a sandbox created now by this run."""
        return {
            L_MARK: "1",
            L_RUN: self.run_id,
            L_PID: str(self.pid),
            L_START: str(self.start_ticks),
            L_BOOT: self.boot_id,
            L_HOST: self.host,
            L_CREATED: f"{time.time():.3f}",
        }

    def with_run_id(self, run_id: str) -> RunIdentity:
        """The same owner process under another run id."""
        return RunIdentity(run_id, self.pid, self.start_ticks, self.boot_id, self.host)


@functools.cache
def _identity_for(pid: int) -> RunIdentity:
    return RunIdentity(
        run_id=uuid.uuid4().hex[:12],
        pid=pid,
        start_ticks=process_start_ticks(pid) or 0,
        boot_id=boot_id(),
        host=socket.gethostname(),
    )


def current_identity() -> RunIdentity:
    """This process's identity, with a run id generated once per process (fork-safe)."""
    return _identity_for(os.getpid())


@dataclass(frozen=True)
class ContainerInfo:
    """One sandbox container as listed by podman."""

    id: str
    name: str
    state: str
    labels: Mapping[str, str]
    created: float

    @property
    def run_id(self) -> str:
        """The run that created the container (``""`` when unlabelled)."""
        return self.labels.get(L_RUN, "")

    def owner_alive(self) -> bool | None:
        """True/False when the owner is judged alive/dead on this host; None for other hosts."""
        lb = self.labels
        if lb.get(L_HOST, "") != socket.gethostname():
            return None
        if lb.get(L_BOOT, "") != boot_id():
            return False
        try:
            pid = int(lb.get(L_PID, ""))
            start = int(lb.get(L_START, ""))
        except ValueError:
            return False
        ticks = process_start_ticks(pid)
        return ticks is not None and ticks == start


async def list_containers(
    podman: Podman | None = None, run_id: str | None = None
) -> list[ContainerInfo]:
    """All clawrl sandbox containers known to podman (any state), optionally of one run."""
    pm = podman or shared_podman()
    args = ["ps", "-a", "--format", "json", "--filter", f"label={L_MARK}=1"]
    if run_id is not None:
        args += ["--filter", f"label={L_RUN}={run_id}"]
    res = await pm.run(*args)
    rows = orjson.loads(res.stdout or b"[]") or []
    out = []
    for r in rows:
        labels = r.get("Labels") or {}
        names = r.get("Names") or [""]
        created = r.get("Created", 0)
        out.append(
            ContainerInfo(
                id=r.get("Id", ""),
                name=names[0] if names else "",
                state=r.get("State", ""),
                labels=labels,
                created=float(created) if isinstance(created, int | float) else 0.0,
            )
        )
    return out


async def remove_containers(ids: list[str], podman: Podman | None = None) -> None:
    """``podman rm -f -t 0`` the given containers (missing ones are ignored)."""
    if not ids:
        return
    pm = podman or shared_podman()
    # --ignore: a container that vanished meanwhile (its --rm cleanup) is not an error.
    await pm.run("rm", "-f", "--ignore", "-t", "0", *ids, check=False)


async def gc(
    podman: Podman | None = None,
    *,
    run_id: str | None = None,
    include_foreign: bool = False,
    force: bool = False,
) -> list[ContainerInfo]:
    """Remove every sandbox container whose run is dead; return what was removed.

    Args:
        podman: backend (default: the shared one).
        run_id: only consider containers of this run.
        include_foreign: also remove containers labelled with another host name (only when you
            know no orchestrator on that host is alive).
        force: remove the selected containers (all, or those of ``run_id``) even when their
            owner is alive, e.g. ``sandbox gc --run ID --force``.

    Never removes containers of live runs (of this or other orchestrators) unless ``force``.
    Stale loop or host state does not exist: a sandbox's writable places are tmpfs mounts that
    vanish with the container.
    """
    doomed = []
    for c in await list_containers(podman, run_id):
        alive = c.owner_alive()
        if force or alive is False or (alive is None and include_foreign):
            doomed.append(c)
    await remove_containers([c.id for c in doomed], podman)
    return doomed


# ``{prefix}{pid}.{start ticks}-{random}``: a host temporary directory that names its owner
_OWNED_PREFIX = r"clawrl-[a-z0-9-]*-"
_OWNED_DIR = re.compile(rf"^{_OWNED_PREFIX}(\d+)\.(\d+)-")


def owned_tempdir(prefix: str) -> tempfile.TemporaryDirectory[str]:
    """A host temporary directory that names the process owning it, for :func:`gc_tempdirs`.

    ``tempfile.TemporaryDirectory`` named ``{prefix}{pid}.{start ticks}-{random}`` under
    ``tempfile.gettempdir()``; it is removed when the context exits, and by
    :func:`gc_tempdirs` once its process is dead (e.g. after ``kill -9``, which skips the exit).

    Args:
        prefix: ``clawrl-`` followed by lowercase letters, digits and dashes, ending in ``-``
            (e.g. ``"clawrl-rollout-"``).

    Raises:
        ValueError: ``prefix`` is not of that form.
    """
    if not re.fullmatch(_OWNED_PREFIX, prefix):
        raise ValueError(f"owned_tempdir prefix must look like 'clawrl-name-', got {prefix!r}")
    pid = os.getpid()
    return tempfile.TemporaryDirectory(prefix=f"{prefix}{pid}.{process_start_ticks(pid) or 0}-")


def gc_tempdirs(root: str | Path | None = None) -> list[Path]:
    """Remove the :func:`owned_tempdir` directories whose owning process is dead.

    A directory's owner is dead when no process with its pid and start time exists on this
    host (the start time guards against pid reuse). Directories of live processes, and any
    other names, are left alone; one that cannot be removed is skipped.

    Args:
        root: where to look (default ``tempfile.gettempdir()``).

    Returns:
        The directories removed.
    """
    base = Path(root) if root is not None else Path(tempfile.gettempdir())
    removed: list[Path] = []
    try:
        entries = list(base.iterdir())
    except OSError:
        return removed
    for entry in entries:
        m = _OWNED_DIR.match(entry.name)
        if m is None or not entry.is_dir() or entry.is_symlink():
            continue
        if process_start_ticks(int(m.group(1))) == int(m.group(2)):
            continue  # its owner is alive
        shutil.rmtree(entry, ignore_errors=True)
        if not entry.exists():
            removed.append(entry)
    return removed
