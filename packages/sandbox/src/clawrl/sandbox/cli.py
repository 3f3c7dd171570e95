"""``sandbox`` command line: doctor, ls, gc, run, build-image."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import orjson

from .errors import SandboxError
from .image import DEFAULT_IMAGE_PACKAGES, DEFAULT_MIRROR, build_image
from .podman import Podman, cgroup_mode
from .reaper import gc, gc_tempdirs, list_containers
from .sandbox import Sandbox
from .seccomp import sandbox_seccomp_profile
from .spec import Limits, SandboxSpec

__all__ = ["main"]


def _ok(name: str, detail: str) -> None:
    print(f"[ ok ] {name}: {detail}")


def _fail(name: str, detail: str, fix: str) -> None:
    print(f"[FAIL] {name}: {detail}\n       fix: {fix}")


def _host_cgroup_limits(pid: int) -> list[bytes]:
    """The memory and pids limits of host process ``pid``'s cgroup (v1 or v2), as read."""
    paths: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
            _, ctrls, path = line.split(":", 2)
            for c in ctrls.split(",") if ctrls else [""]:
                paths[c] = path.lstrip("/")
    root = Path("/sys/fs/cgroup")
    candidates = (
        (
            root / "memory" / paths.get("memory", "-") / "memory.limit_in_bytes",
            root / paths.get("", "-") / "memory.max",
        ),
        (
            root / "pids" / paths.get("pids", "-") / "pids.max",
            root / paths.get("", "-") / "pids.max",
        ),
    )
    out = []
    for options in candidates:
        for f in options:
            with contextlib.suppress(OSError):
                out.append(f.read_bytes().strip())
                break
    return out


async def _doctor() -> int:
    """Check the host for sandboxes, printing one line per check; 1 if any failed."""
    if shutil.which("podman") is None:
        _fail(
            "podman",
            "not found on PATH",
            "apt-get install -y podman runc  (or bash tools/setup.sh)",
        )
        return 1
    mode = cgroup_mode()
    pm = await _check_runtime(mode)
    if pm is None:
        return 1
    failed = _check_cgroups(mode)
    failed += _check_host_limits()
    failed += await _check_sandbox()
    if shutil.which("debootstrap"):
        _ok("debootstrap", "found (for `sandbox build-image`)")
    else:
        print(
            "[warn] debootstrap: missing; only needed for `sandbox build-image` "
            "(fix: apt-get install -y debootstrap)"
        )
    failed += await _check_leftovers(pm)
    return 1 if failed else 0


async def _check_runtime(mode: str) -> Podman | None:
    """podman's version and OCI runtime; None when the chosen runtime is not installed."""
    pm = Podman()
    r = await Podman(runtime="").run("version", "--format", "{{.Client.Version}}", check=False)
    _ok("podman", f"{pm.executable} version {r.stdout.decode().strip()}")
    if pm.runtime is None:
        _ok("runtime", f"podman's default (cgroups: {mode})")
    else:
        _ok("runtime", f"{pm.runtime} (cgroups: {mode}; CLAWRL_SANDBOX_RUNTIME overrides)")
    if pm.runtime is not None and shutil.which(pm.runtime) is None:
        _fail(
            "runtime",
            f"OCI runtime {pm.runtime!r} is not installed",
            f"apt-get install -y {pm.runtime}, or unset/change CLAWRL_SANDBOX_RUNTIME",
        )
        return None
    return pm


def _check_cgroups(mode: str) -> int:
    """runc where cgroups are not unified, and the memory, pids and cpu controllers."""
    failed = 0
    if mode != "unified" and shutil.which("runc") is None:
        failed += 1
        _fail(
            "runc",
            f"cgroups are {mode}: crun refuses them and runc is missing",
            "apt-get install -y runc",
        )
    ctrl = Path("/sys/fs/cgroup")
    have = set()
    if (ctrl / "cgroup.controllers").exists():
        have = set((ctrl / "cgroup.controllers").read_text().split())
    else:
        have = {p.name for p in ctrl.iterdir() if p.is_dir()}
    for c in ("memory", "pids", "cpu"):
        if c in have:
            _ok(f"cgroup {c}", "available")
        else:
            failed += 1
            _fail(
                f"cgroup {c}",
                "controller missing: limits will not hold",
                "enable it (kernel cmdline cgroup_enable=..., or systemd delegation for rootless)",
            )
    return failed


def _check_host_limits() -> int:
    """The host's nofile hard limit and the seccomp profile sandboxes get."""
    failed = 0
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1024:
        failed += 1
        _fail("nofile", f"hard limit {hard} < 1024", "raise `ulimit -Hn` for the orchestrator")
    else:
        _ok("nofile", f"host hard limit {hard}; sandboxes get --ulimit nofile=1024:1024 by default")
    profile = sandbox_seccomp_profile()
    if profile is not None:
        _ok("seccomp", f"podman's default without inotify_init/inotify_init1 ({profile})")
    else:
        failed += 1
        _fail(
            "seccomp",
            "no default profile to derive from: sandbox root can use host root's inotify instances",
            "apt-get install -y containers-common (ships /usr/share/containers/seccomp.json)",
        )
    return failed


async def _check_sandbox() -> int:
    """Create, exec in and destroy a sandbox; its memory and pids limits hold."""
    failed = 0
    t0 = time.monotonic()
    try:
        sb = await Sandbox.create(SandboxSpec(limits=Limits(memory="128m", pids=100)))
        try:
            res = await sb.exec("echo ok; test ! -e /root/.cache && test ! -e /work", timeout=30)
            # read on the host: inside, /sys/fs/cgroup is masked
            seen = _host_cgroup_limits((await sb._find_init()).pid)
        finally:
            await sb.destroy()
        if res.ok and res.stdout.strip() == b"ok":
            _ok("sandbox", f"default rootfs create+exec+destroy in {time.monotonic() - t0:.2f} s")
        else:
            failed += 1
            _fail(
                "sandbox", f"exec returned {res.exit_code}: {res.stderr!r}", "see the error above"
            )
        if seen == [str(128 << 20).encode(), b"100"]:
            _ok("limits", "memory and pids limits applied inside the sandbox's cgroup")
        else:
            failed += 1
            _fail(
                "limits",
                f"expected memory {128 << 20} and pids 100 in the sandbox cgroup, saw {seen}",
                "enable the memory and pids cgroup controllers (rootless: delegate them via "
                "systemd, see podman's rootless tutorial)",
            )
    except SandboxError as e:
        failed += 1
        msg = str(e)
        fix = "check `podman run` by hand with the printed error"
        if "OCI runtime" in msg and "not found" in msg:
            fix = "install the runtime (apt-get install -y runc) or set CLAWRL_SANDBOX_RUNTIME"
        elif "hybrid" in msg:
            fix = "cgroups are hybrid: install runc or set CLAWRL_SANDBOX_RUNTIME=runc"
        elif "setrlimit" in msg or "rlimit" in msg:
            fix = "host limits are lower than requested: lower Limits.nofile"
        _fail("sandbox", msg, fix)
    return failed


async def _check_leftovers(pm: Podman) -> int:
    """Containers of dead runs left over: a warning; failing to list them is a failure."""
    failed = 0
    try:
        dead = [c for c in await list_containers(pm) if c.owner_alive() is False]
    except SandboxError as e:
        failed += 1
        _fail("podman ps", str(e), "see the error above")
        dead = []
    if dead:
        print(f"[warn] {len(dead)} container(s) of dead runs left over (fix: sandbox gc)")
    else:
        _ok("leftovers", "no containers of dead runs")
    return failed


async def _ls(as_json: bool) -> int:
    rows = []
    for c in await list_containers():
        alive = c.owner_alive()
        owner = {True: "alive", False: "dead", None: "other-host"}[alive]
        rows.append(
            {
                "name": c.name,
                "id": c.id[:12],
                "run_id": c.run_id,
                "state": c.state,
                "owner_pid": c.labels.get("clawrl.owner_pid", ""),
                "owner": owner,
                "age_s": round(
                    time.time() - float(c.labels.get("clawrl.created", c.created) or 0), 1
                ),
            }
        )
    if as_json:
        sys.stdout.write(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    cols = ["name", "run_id", "state", "owner_pid", "owner", "age_s"]
    widths = {k: max(len(k), *(len(str(r[k])) for r in rows)) if rows else len(k) for k in cols}
    print("  ".join(k.upper().ljust(widths[k]) for k in cols))
    for r in rows:
        print("  ".join(str(r[k]).ljust(widths[k]) for k in cols))
    return 0


async def _gc(run_id: str | None, force: bool, include_foreign: bool) -> int:
    removed = await gc(run_id=run_id, force=force, include_foreign=include_foreign)
    for c in removed:
        print(f"removed {c.name} (run {c.run_id})")
    print(f"{len(removed)} container(s) removed")
    if run_id is None:  # host temporary directories carry no run id, only their owner's pid
        dirs = gc_tempdirs()
        print(
            f"{len(dirs)} temporary director{'y' if len(dirs) == 1 else 'ies'} of dead "
            "processes removed"
        )
    return 0


async def _run(args: argparse.Namespace) -> int:
    env = {}
    for item in args.env:
        k, sep, v = item.partition("=")
        if not sep:
            raise SandboxError(f"--env {item!r}: expected KEY=VALUE")
        env[k] = v
    limits = Limits(
        memory=args.memory, cpus=args.cpus, pids=args.pids, workspace_size=args.workspace_size
    )
    spec = SandboxSpec(
        image=args.image,
        env=env,
        limits=limits,
        model_socket=Path(args.model_socket) if args.model_socket else None,
    )
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        cmd = ["/bin/sh", "-c", "id; pwd; ls -la"]

    def show(stream: str, data: bytes) -> None:
        out = sys.stdout.buffer if stream == "stdout" else sys.stderr.buffer
        out.write(data)
        out.flush()

    async with await Sandbox.create(spec) as sb:
        if args.workspace:
            await sb.put_dir(args.workspace)
        res = await sb.exec(cmd, timeout=args.timeout, on_output=show)
    if res.timed_out:
        print(f"sandbox: timed out after {args.timeout} s", file=sys.stderr)
        return 124
    return res.exit_code


async def _build(args: argparse.Namespace) -> int:
    pkgs = (
        [p for p in args.packages.split(",") if p]
        if args.packages
        else list(DEFAULT_IMAGE_PACKAGES)
    )
    t0 = time.monotonic()
    tag = await build_image(
        suite=args.suite,
        packages=pkgs,
        mirror=args.mirror,
        tag=args.tag,
        rebuild=args.rebuild,
        log=(lambda line: print(line, file=sys.stderr)) if args.verbose else None,
    )
    print(tag)
    print(f"(ready in {time.monotonic() - t0:.1f} s)", file=sys.stderr)
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sandbox", description="clawrl podman sandboxes")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("doctor", help="check podman, runtime, cgroups and limits; print fixes")
    ls = sub.add_parser("ls", help="list clawrl sandbox containers")
    ls.add_argument("--json", action="store_true")
    g = sub.add_parser(
        "gc",
        help="remove containers of dead runs (and, without --run, temp dirs of dead processes)",
    )
    g.add_argument("--run", dest="run_id", help="only this run id")
    g.add_argument("--force", action="store_true", help="also remove containers of live runs")
    g.add_argument("--include-foreign", action="store_true", help="also containers of other hosts")
    r = sub.add_parser("run", help="one-off: create a sandbox, run a command, destroy it")
    r.add_argument("--image", default=None, help="podman image (default: host /usr rootfs)")
    r.add_argument("--memory", default="1g")
    r.add_argument("--cpus", type=float, default=1.0)
    r.add_argument("--pids", type=int, default=512)
    r.add_argument("--workspace-size", default="256m")
    r.add_argument("--workspace", default=None, help="host directory copied into /workspace")
    r.add_argument("--model-socket", default=None, help="host unix socket to mount (+ forwarder)")
    r.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    r.add_argument("--timeout", type=float, default=None, help="seconds")
    r.add_argument("cmd", nargs=argparse.REMAINDER, help="command (after --)")
    b = sub.add_parser("build-image", help="build the hermetic Debian image (debootstrap)")
    b.add_argument("--suite", default="bookworm")
    b.add_argument(
        "--packages",
        default=None,
        help=f"comma-separated Debian packages (default: {','.join(DEFAULT_IMAGE_PACKAGES)})",
    )
    b.add_argument("--mirror", default=DEFAULT_MIRROR)
    b.add_argument("--tag", default=None)
    b.add_argument("--rebuild", action="store_true")
    b.add_argument("-v", "--verbose", action="store_true")
    return p


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "doctor":
        return asyncio.run(_doctor())
    if args.command == "ls":
        return asyncio.run(_ls(args.json))
    if args.command == "gc":
        return asyncio.run(_gc(args.run_id, args.force, args.include_foreign))
    if args.command == "run":
        return asyncio.run(_run(args))
    if args.command == "build-image":
        return asyncio.run(_build(args))
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sandbox`` command; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        rc = _dispatch(args)
        sys.stdout.flush()  # a closed pipe shows up here, not in an ignored exit-time error
        return rc
    except BrokenPipeError:  # `sandbox ls | head`: the reader left; not an error of ours
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except SandboxError as e:
        print(f"sandbox: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())
