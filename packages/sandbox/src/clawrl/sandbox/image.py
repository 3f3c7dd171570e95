"""A hermetic Debian image for sandboxes: ``debootstrap`` + ``podman import``, cached.

``sandbox build-image`` (or :func:`build_image`) bootstraps a minimal Debian (``minbase``
variant plus the requested packages) from the Debian mirror into a temporary directory,
replaces its ``/etc/resolv.conf`` and ``/etc/hosts`` with sandbox ones (no DNS), adds the
``sandbox`` user (1000:1000), drops apt caches and imports the tree as a local podman image.
The image tag encodes the recipe (suite, packages, recipe version), so a second call with the
same recipe finds the image and returns at once; downloaded ``.deb`` files are kept in the
cache directory and make rebuilds faster.

Add packages for harnesses with ``--packages``, e.g. ``sandbox build-image --packages
python3,nodejs,npm,git`` (Debian bookworm's nodejs is v18; harnesses that need a newer Node
can mount a Node build read-only via ``SandboxSpec.read_only_mounts``). The default set is
:data:`DEFAULT_IMAGE_PACKAGES` (``python3`` is needed by the model forwarder).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from .errors import ImageBuildError
from .podman import Podman, shared_podman
from .rootfs import GROUP, HOSTS, PASSWD, RESOLV, cache_dir

__all__ = ["DEFAULT_IMAGE_PACKAGES", "DEFAULT_MIRROR", "build_image", "image_tag"]

DEFAULT_IMAGE_PACKAGES: tuple[str, ...] = ("python3",)
DEFAULT_MIRROR = "http://deb.debian.org/debian"
IMAGE_RECIPE_VERSION = "1"


def image_tag(suite: str = "bookworm", packages: Sequence[str] = DEFAULT_IMAGE_PACKAGES) -> str:
    """The tag :func:`build_image` gives an image of this recipe."""
    h = hashlib.sha256(_recipe(suite, packages).encode()).hexdigest()[:10]
    return f"localhost/clawrl-sandbox:{suite}-{h}"


def _recipe(suite: str, packages: Sequence[str]) -> str:
    """The recipe an image is named and labelled by: version, suite, sorted packages."""
    return f"{IMAGE_RECIPE_VERSION}|{suite}|{','.join(sorted(set(packages)))}"


async def _run(argv: list[str], log: Callable[[str], None] | None) -> None:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        stdin=asyncio.subprocess.DEVNULL,
    )
    tail: list[str] = []
    assert proc.stdout is not None
    async for raw in proc.stdout:
        line = raw.decode("utf-8", "replace").rstrip()
        tail = [*tail[-30:], line]
        if log is not None:
            log(line)
    if await proc.wait() != 0:
        raise ImageBuildError(f"`{' '.join(argv[:4])} …` failed:\n" + "\n".join(tail))


async def build_image(
    *,
    suite: str = "bookworm",
    packages: Sequence[str] = DEFAULT_IMAGE_PACKAGES,
    mirror: str = DEFAULT_MIRROR,
    tag: str | None = None,
    rebuild: bool = False,
    podman: Podman | None = None,
    log: Callable[[str], None] | None = None,
) -> str:
    """Build (or find cached) the Debian sandbox image and return its tag.

    Args:
        suite: Debian suite (``bookworm``, ``trixie``, …).
        packages: Debian packages installed on top of ``minbase``.
        mirror: Debian mirror URL.
        tag: image tag (default :func:`image_tag` of the recipe).
        rebuild: build even when the image exists.
        podman: backend (default: the shared one).
        log: called with each line of build output (default: silent).

    Returns:
        The image tag, usable as ``SandboxSpec(image=tag)``.

    Raises:
        ImageBuildError: not root, debootstrap missing, or a build step failed.
    """
    pm = podman or shared_podman()
    tag = tag or image_tag(suite, packages)
    if not rebuild:
        r = await pm.run("image", "exists", tag, check=False)
        if r.returncode == 0:
            return tag
    debootstrap = _check_build_host(packages)
    cache = cache_dir()
    debs = cache / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="image-build-", dir=cache))
    root = work / "root"
    try:
        argv = [debootstrap, "--variant=minbase", f"--cache-dir={debs.resolve()}"]
        if packages:
            argv.append("--include=" + ",".join(sorted(set(packages))))
        await _run([*argv, suite, str(root), mirror], log)
        _finish_root(root)
        tar = work / "root.tar"
        await _run(["tar", "-C", str(root), "--numeric-owner", "-cf", str(tar), "."], log)
        await _run(
            pm.argv(
                "import",
                "--change",
                'CMD ["sleep", "infinity"]',
                "--change",
                f"LABEL clawrl.image.recipe={_recipe(suite, packages)}",
                str(tar),
                tag,
            ),
            log,
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return tag


def _check_build_host(packages: Sequence[str]) -> str:
    """The debootstrap executable, once the host can build and the package names are sane.

    Raises:
        ImageBuildError: debootstrap missing, not root, or an invalid package name.
    """
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None:
        raise ImageBuildError("debootstrap not found: `apt-get install -y debootstrap`")
    if os.geteuid() != 0:
        raise ImageBuildError("debootstrap needs root (run `sandbox build-image` as root)")
    for p in packages:
        if not p or not all(c.isalnum() or c in "+-.:" for c in p):
            raise ImageBuildError(f"invalid package name {p!r}")
    return debootstrap


def _finish_root(root: Path) -> None:
    """Make a debootstrapped tree a sandbox root: the sandbox's /etc files and user, the
    workspace and home directories, and no apt caches."""
    etc = root / "etc"
    for name, text in {"resolv.conf": RESOLV, "hosts": HOSTS, "hostname": "sandbox\n"}.items():
        (etc / name).unlink(missing_ok=True)
        (etc / name).write_text(text)
    passwd = (etc / "passwd").read_text()
    if "\nsandbox:" not in passwd:
        sandbox_line = next(ln for ln in PASSWD.splitlines() if ln.startswith("sandbox:"))
        (etc / "passwd").write_text(passwd.rstrip("\n") + "\n" + sandbox_line + "\n")
        group_line = next(ln for ln in GROUP.splitlines() if ln.startswith("sandbox:"))
        group = (etc / "group").read_text()
        (etc / "group").write_text(group.rstrip("\n") + "\n" + group_line + "\n")
    for d in ("workspace", "home/sandbox"):
        (root / d).mkdir(parents=True, exist_ok=True)
    for d in ("var/cache/apt/archives", "var/lib/apt/lists"):
        target = root / d
        if target.is_dir():
            for entry in target.iterdir():
                if entry.is_file():
                    entry.unlink()
