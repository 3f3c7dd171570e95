"""The sandboxes' seccomp profile: podman's default, without inotify instances, ptrace or
user namespaces.

A sandbox (rootful podman, no user namespace) runs as host root, so every inotify instance
it creates is charged to host root's per-user limit (``fs.inotify.max_user_instances``, 128
by default): 128 ``inotify_init1`` calls inside one sandbox make host root's own
``inotify_init`` fail with ``EMFILE``, and a user namespace does not help on this kernel
(podman, as root, owns the namespace, and the kernel charges a namespace's counts to its
owner as well). So sandboxes cannot create inotify instances at all: this profile is
containers-common's default (the one podman applies when none is given) with
``inotify_init`` and ``inotify_init1`` removed from its allow rules and refused by an
explicit rule with ``ENOSYS``, the errno of "not supported" that programs fall back from
(``tail -f`` polls; Node's ``fs.watch`` throws ``ENOSYS``).

Two more refusals close what a red-team review found:

* ``ptrace``, ``process_vm_readv`` / ``process_vm_writev`` and ``pidfd_getfd`` (``EPERM``):
  sandbox root has the same uid and capabilities as the sandbox's PID 1, so it could trace
  PID 1 and kill it (an infra-error the agent chooses) or make it run its own program (a
  process :meth:`~clawrl.sandbox.Sandbox.kill_all` never signals). (``/proc/1/mem``, the
  other way in, is masked by the run arguments.)
* user namespaces: ``clone`` and ``unshare`` with ``CLONE_NEWUSER`` (``EPERM``), and
  ``clone3`` (``ENOSYS``: its flags are in memory, out of seccomp's reach; the C libraries
  fall back to ``clone``). Without a user namespace, sandbox root (no ``CAP_SYS_ADMIN``)
  can make no PID, mount or cgroup namespace, so it cannot hide processes in a nested PID
  namespace, mount its own cgroup2 and move or freeze processes out of the sandbox's cgroup.

The profile is derived at run time from the host's file, so it follows the host's podman,
and written once under :func:`~clawrl.sandbox.rootfs.cache_dir` (content-addressed).
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from .rootfs import cache_dir

__all__ = [
    "BLOCKED_SYSCALLS",
    "DEFAULT_PROFILE_PATHS",
    "DENIED_SYSCALLS",
    "NO_USERNS_SYSCALLS",
    "sandbox_seccomp_profile",
]

log = logging.getLogger(__name__)

#: Syscalls a sandbox may not make (they would take host root's per-user inotify instances;
#: clone3's flags cannot be checked): ENOSYS.
BLOCKED_SYSCALLS = ("inotify_init", "inotify_init1", "clone3")
#: Syscalls that reach into another process of the sandbox (PID 1 included): EPERM.
DENIED_SYSCALLS = ("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd")
#: Allowed only without ``CLONE_NEWUSER`` in their flags (argument 0): EPERM with it.
NO_USERNS_SYSCALLS = ("clone", "unshare")
_CLONE_NEWUSER = 0x10000000
#: Where containers-common keeps podman's default profile, in podman's order of preference.
DEFAULT_PROFILE_PATHS = (
    Path("/etc/containers/seccomp.json"),
    Path("/usr/share/containers/seccomp.json"),
)


def derive_profile(base: dict[str, Any]) -> dict[str, Any]:
    """``base`` (an OCI / podman seccomp profile) with :data:`BLOCKED_SYSCALLS` (``ENOSYS``)
    and :data:`DENIED_SYSCALLS` (``EPERM``) refused, and :data:`NO_USERNS_SYSCALLS` allowed
    only without ``CLONE_NEWUSER``.

    Removes those names from every rule of ``base`` and appends the rules above. The input
    is not modified.

    Raises:
        ValueError: ``base`` has no ``syscalls`` list.
    """
    rules = base.get("syscalls")
    if not isinstance(rules, list):
        raise ValueError("a seccomp profile needs a 'syscalls' list")
    out = dict(base)
    ours = {*BLOCKED_SYSCALLS, *DENIED_SYSCALLS, *NO_USERNS_SYSCALLS}
    kept = []
    for rule in rules:
        names = [n for n in rule.get("names", []) if n not in ours]
        if names:
            kept.append({**rule, "names": names})
    refuse = "SCMP_ACT_ERRNO"
    kept += [
        {"names": list(BLOCKED_SYSCALLS), "action": refuse, "errnoRet": errno.ENOSYS},
        {"names": list(DENIED_SYSCALLS), "action": refuse, "errnoRet": errno.EPERM},
    ]
    for value, action in ((0, "SCMP_ACT_ALLOW"), (_CLONE_NEWUSER, refuse)):
        userns_rule: dict[str, Any] = {
            "names": list(NO_USERNS_SYSCALLS),
            "action": action,
            "args": [
                {"index": 0, "value": _CLONE_NEWUSER, "valueTwo": value, "op": "SCMP_CMP_MASKED_EQ"}
            ],
        }
        if action == refuse:
            userns_rule["errnoRet"] = errno.EPERM
        kept.append(userns_rule)
    out["syscalls"] = kept
    return out


@functools.cache
def sandbox_seccomp_profile() -> Path | None:
    """The path of the sandboxes' seccomp profile (built on first call, then cached).

    Returns ``None``, with a warning logged once, when the host has none of
    :data:`DEFAULT_PROFILE_PATHS` (podman then applies its built-in default, and sandbox
    root can use host root's inotify instances; ``sandbox doctor`` reports it).

    Raises:
        OSError: the profile cannot be written to the cache directory.
        ValueError: the host's default profile is not a seccomp profile.
    """
    base_path = next((p for p in DEFAULT_PROFILE_PATHS if p.is_file()), None)
    if base_path is None:
        log.warning(
            "no seccomp profile at %s: sandboxes run with podman's built-in default, "
            "so sandbox root can use host root's inotify instances",
            " or ".join(map(str, DEFAULT_PROFILE_PATHS)),
        )
        return None
    data = json.dumps(derive_profile(json.loads(base_path.read_text())), sort_keys=True)
    digest = hashlib.sha256(data.encode()).hexdigest()[:16]
    out = cache_dir() / "seccomp" / f"sandbox-{digest}.json"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        tmp.write_text(data)
        os.replace(tmp, out)
    return out
