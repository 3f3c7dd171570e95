"""The zero-set-up default root filesystem: an empty root + the host's ``/usr`` read-only.

:func:`default_rootfs` builds (once, cached) a small skeleton directory::

    bin -> usr/bin   lib -> usr/lib   lib64 -> usr/lib64   sbin -> usr/sbin   (merged /usr)
    etc/             our own: passwd, group, hosts, hostname, nsswitch.conf, resolv.conf
                     (empty: no name server), os-release link, ld.so.cache and the
                     /etc/alternatives links into /usr copied from the host (no secrets:
                     paths only), nothing else of the host's /etc
    usr/ workspace/ tmp/ root/ home/sandbox/ run/ var/tmp/ proc/ dev/ sys/   (mount points)

The sandbox mounts the host's ``/usr`` read-only on ``usr/``, and tmpfs on ``/workspace``,
``/tmp``, ``/root`` and ``/home/sandbox``; the skeleton itself is mounted read-only and shared
by every sandbox. So the sandbox sees the host's programs and libraries (Debian's
``/usr/bin/python3``, ``/usr/bin/node``, coreutils, ``sh``…) and nothing else: no ``/root``,
``/home``, ``/work``, project checkout, host ``/etc`` or host environment.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from pathlib import Path

__all__ = ["ROOTFS_VERSION", "cache_dir", "default_rootfs"]

ROOTFS_VERSION = "2"

PASSWD = """\
root:x:0:0:root:/root:/bin/sh
sandbox:x:1000:1000:sandbox:/home/sandbox:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
"""
GROUP = """\
root:x:0:
sandbox:x:1000:
nogroup:x:65534:
"""
HOSTS = """\
127.0.0.1 localhost sandbox
::1 localhost ip6-localhost ip6-loopback
"""
NSSWITCH = """\
passwd: files
group: files
shadow: files
hosts: files dns
networks: files
protocols: files
services: files
"""
# No name server at all: with --network none every lookup of a non-local name fails.
RESOLV = "# clawrl sandbox: no DNS\noptions attempts:1 timeout:1\n"

MOUNT_POINTS = (
    "usr",
    "workspace",
    "tmp",
    "root",
    "home/sandbox",
    "run",
    "var/tmp",
    "proc",
    "dev",
    "sys",
    "opt",
)
MERGED_USR = {"bin": "usr/bin", "lib": "usr/lib", "lib64": "usr/lib64", "sbin": "usr/sbin"}


def cache_dir() -> Path:
    """Where clawrl-sandbox caches its artefacts (``$CLAWRL_SANDBOX_CACHE`` or XDG cache)."""
    env = os.environ.get("CLAWRL_SANDBOX_CACHE")
    if env:
        return Path(env).absolute()  # podman may run from another directory (conmon_dir)
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).absolute() if xdg else Path.home() / ".cache"
    return base / "clawrl" / "sandbox"


def _alternatives(host_etc: Path) -> dict[str, str]:
    """Host /etc/alternatives links whose targets live under /usr (name -> target)."""
    out: dict[str, str] = {}
    alt = host_etc / "alternatives"
    if not alt.is_dir():
        return out
    for entry in sorted(alt.iterdir()):
        if entry.is_symlink():
            target = os.readlink(entry)
            if target.startswith("/usr/"):
                out[entry.name] = target
    return out


def _build(dest: Path, host_etc: Path) -> None:
    for d in MOUNT_POINTS:
        (dest / d).mkdir(parents=True, exist_ok=True)
    (dest / "tmp").chmod(0o1777)
    (dest / "var/tmp").chmod(0o1777)
    for name, target in MERGED_USR.items():
        (dest / name).symlink_to(target)
    etc = dest / "etc"
    etc.mkdir()
    for name, text in {
        "passwd": PASSWD,
        "group": GROUP,
        "hosts": HOSTS,
        "hostname": "sandbox\n",
        "nsswitch.conf": NSSWITCH,
        "resolv.conf": RESOLV,
        "shells": "/bin/sh\n/bin/bash\n",
    }.items():
        (etc / name).write_text(text)
    (etc / "os-release").symlink_to("../usr/lib/os-release")
    (etc / "mtab").symlink_to("/proc/self/mounts")
    ld_cache = host_etc / "ld.so.cache"
    if ld_cache.is_file():
        shutil.copyfile(ld_cache, etc / "ld.so.cache")
    alt = etc / "alternatives"
    alt.mkdir()
    for name, target in _alternatives(host_etc).items():
        (alt / name).symlink_to(target)
    for p in [dest, *dest.rglob("*")]:
        if not p.is_symlink() and p.is_dir() and p.name not in ("tmp",) and p != dest / "var/tmp":
            p.chmod(0o755)


def default_rootfs(host_etc: Path = Path("/etc")) -> Path:
    """Return the cached skeleton root directory, building it on first use (atomic rename).

    The cache key covers :data:`ROOTFS_VERSION`, the host's ld.so.cache and its
    /etc/alternatives links, so a host package change yields a fresh skeleton.
    """
    h = hashlib.sha256(ROOTFS_VERSION.encode())
    ld_cache = host_etc / "ld.so.cache"
    if ld_cache.is_file():
        h.update(ld_cache.read_bytes())
    h.update(repr(sorted(_alternatives(host_etc).items())).encode())
    root = cache_dir() / "rootfs"
    dest = root / f"default-{h.hexdigest()[:12]}"
    if dest.is_dir():
        return dest
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
    try:
        tmp.chmod(0o755)
        _build(tmp, host_etc)
        try:
            tmp.rename(dest)
        except OSError:
            if not dest.is_dir():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest
