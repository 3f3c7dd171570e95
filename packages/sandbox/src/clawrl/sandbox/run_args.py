"""The ``podman run`` command line of a sandbox (:meth:`Sandbox.create`).

Limits, tmpfs places, security options, environment, labels, mounts, and the root filesystem
chosen from the spec (image, rootfs directory, or the shared host-``/usr`` skeleton).
"""

from __future__ import annotations

import os
import resource
from collections.abc import Mapping
from pathlib import Path

from .errors import SandboxSpecError
from .reaper import RunIdentity
from .rootfs import default_rootfs
from .seccomp import sandbox_seccomp_profile
from .spec import MODEL_SOCKET_PATH, WORKSPACE, SandboxSpec, check_sandbox_path
from .tarball import uid_gid

__all__ = ["FORWARDER_PATH", "FORWARDER_READY", "FORWARDER_SOURCE", "PATH_ENV", "run_args"]

FORWARDER_SOURCE = Path(__file__).with_name("forwarder.py")
FORWARDER_PATH = "/run/clawrl/forwarder.py"
FORWARDER_READY = "/run/clawrl/forwarder.ready"
PATH_ENV = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_NPROC = 4096
# The container's PID 1 and main process: ``sleep`` (the wall clock) with SIGCHLD ignored, so
# that orphans reparented to it are reaped by the kernel. A PID 1 without signal handlers
# ignores every signal sent from inside its PID namespace, SIGKILL included: the agent can
# neither end the sandbox early nor make it vanish mid-rollout.
_MAIN = ("env", "--ignore-signal=CHLD", "sleep")
# Size of /run and /dev/shm.
_SMALL_TMPFS = 16 << 20


def _host_hard_limit(which: int, fallback: int) -> int:
    _, hard = resource.getrlimit(which)
    return fallback if hard == resource.RLIM_INFINITY else int(hard)


def _under_tmpfs(path: str, home: str) -> bool:
    """True if ``path`` lies in a place that is a fresh tmpfs in every sandbox."""
    p = check_sandbox_path(path)
    return any(p == t or p.startswith(t + "/") for t in (WORKSPACE, "/tmp", home, "/run", "/dev"))


def run_args(
    spec: SandboxSpec,
    ident: RunIdentity,
    name: str,
    *,
    image_root: Path | None = None,
    image_env: Mapping[str, str] | None = None,
) -> list[str]:
    """argv (after ``podman``) that starts the sandbox container ``name`` for ``spec``.

    ``image_root``: the mounted image (``podman image mount``) used as an overlaid
    ``--rootfs`` instead of ``spec.image`` (a writable root, whose overlay must live on a
    capped filesystem), with the image's own environment ``image_env``.

    Raises:
        SandboxSpecError: the model socket or the rootfs directory does not exist.
    """
    lim = spec.limits
    uid, _gid = uid_gid(spec.user)
    home = "/root" if uid == 0 else "/home/sandbox"
    nofile = min(lim.nofile, _host_hard_limit(resource.RLIMIT_NOFILE, lim.nofile))
    # RLIMIT_NPROC counts a uid's processes host-wide (root is exempt); the pids cgroup
    # is the real per-sandbox cap. Values near the host's hard limit fail in runc.
    nproc = min(_NPROC, _host_hard_limit(resource.RLIMIT_NPROC, _NPROC))
    # No --init: PID 1 is the main process itself (see _MAIN), which nothing inside can kill.
    a = ["run", "-d", "--rm", "--name", name, "--network", spec.network]
    a += ["--hostname", "sandbox", "--no-hosts"]
    a += ["--memory", str(lim.memory_bytes), "--pids-limit", str(lim.pids)]
    if lim.cpus is not None:
        a += ["--cpus", f"{lim.cpus:g}"]
    a += ["--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}"]
    a += ["--security-opt", "no-new-privileges", "--user", spec.user, "--workdir", spec.workdir]
    if spec.read_only_root:
        a += ["--read-only"]
    own = ",U" if uid != 0 else ""  # U: chown the tmpfs to the container user
    a += ["--tmpfs", f"{WORKSPACE}:rw,exec,size={lim.workspace_bytes},mode=0755{own}"]
    a += ["--tmpfs", f"/tmp:rw,exec,size={lim.tmp_bytes},mode=1777"]
    a += ["--tmpfs", f"{home}:rw,exec,size={lim.tmp_bytes},mode=0700{own}"]
    # every writable tmpfs has a size (an unsized one is half the host's RAM)
    a += ["--read-only-tmpfs=false", "--shm-size", str(_SMALL_TMPFS)]
    a += ["--tmpfs", f"/run:rw,nosuid,nodev,size={_SMALL_TMPFS},mode=0755"]
    a += ["--tmpfs", f"/var/tmp:rw,nosuid,nodev,size={lim.tmp_bytes},mode=1777"]
    # podman's /sys/fs/cgroup is an unsized tmpfs writable by root: masked read-only
    a += ["--security-opt", "mask=/sys/fs/cgroup"]
    # PID 1's memory: writable through /proc with ptrace rights, which sandbox root has
    a += ["--security-opt", "mask=/proc/1/mem:/proc/1/task/1/mem"]
    # POSIX message queues count against host root's RLIMIT_MSGQUEUE bytes: none
    a += ["--ulimit", "msgqueue=0:0"]
    # no inotify instances (host root's per-user limit), ptrace, user namespaces: .seccomp
    profile = sandbox_seccomp_profile()
    if profile is not None:
        a += ["--security-opt", f"seccomp={profile}"]
    env = {
        **(image_env or {}),
        "PATH": PATH_ENV,
        "HOME": home,
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        **spec.env,
    }
    for k, v in env.items():
        a += ["--env", f"{k}={v}"]
    for k, v in {**ident.labels(), **spec.labels}.items():
        a += ["--label", f"{k}={v}"]
    if spec.model_socket is not None:
        if not spec.model_socket.exists():
            raise SandboxSpecError(f"model_socket {spec.model_socket} does not exist")
        # read-only: connecting still works, chmod / unlink / replacing it do not
        # absolute: podman starts containers from a directory of its own (podman.conmon_dir)
        a += ["-v", f"{os.path.abspath(spec.model_socket)}:{MODEL_SOCKET_PATH}:ro"]
        a += ["-v", f"{FORWARDER_SOURCE}:{FORWARDER_PATH}:ro"]
    for host, inside in spec.read_only_mounts.items():  # absolute (the spec checks it)
        a += ["-v", f"{host}:{inside}:ro"]
    main = [*_MAIN, "infinity" if lim.wall_clock_s is None else f"{lim.wall_clock_s:g}"]
    root = ["--rootfs", f"{image_root}:O"] if image_root is not None else _root_args(spec, home)
    return [*a, *root, *main]


def _root_args(spec: SandboxSpec, home: str) -> list[str]:
    """The last options and the image, or the ``--rootfs``: what the sandbox's ``/`` is.

    The rootfs is the first positional argument, so these come after every other option.
    """
    if spec.image is not None:
        return ["--pull", "never", "--entrypoint", "[]", spec.image]
    if spec.rootfs is not None:
        if not spec.rootfs.is_dir():
            raise SandboxSpecError(f"rootfs {spec.rootfs} is not a directory")
        return ["--rootfs", f"{spec.rootfs.resolve()}:O"]
    root = default_rootfs()
    # The skeleton is shared by every sandbox: when the runtime would have to create a
    # mount point in it (an extra mount outside the tmpfs places), or the root is writable,
    # give this sandbox a private overlay of it instead.
    private = not spec.read_only_root or any(
        not _under_tmpfs(inside, home) and not (root / inside.lstrip("/")).exists()
        for inside in spec.read_only_mounts.values()
    )
    return ["-v", "/usr:/usr:ro", "--rootfs", f"{root}:O" if private else str(root)]
