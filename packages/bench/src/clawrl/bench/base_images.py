"""Local stand-ins for the registry base images a task's Dockerfile names in ``FROM``.

No image registry is reachable here, so ``python:3.11-slim``, ``ubuntu:22.04`` and the like
cannot be pulled. Each is replaced by a *local base*: the sandbox's debootstrap Debian image
(:func:`clawrl.sandbox.build_image`) with the packages of its recipe, finished by a small
``podman build`` step that gives it what the registry images have and a bare debootstrap
root lacks — an ``ENV PATH`` (so that ``ENV PATH="/root/.local/bin:$PATH"`` expands to
something usable), ``LANG=C.UTF-8``, a ``python``/``pip`` link, and pip allowed to install into the system Python
(Debian's PEP 668 marker removed: ``pip install pytest`` works as on ``python:3.*``).

:data:`BASE_RECIPES` maps image references to recipes (first match wins); the table in
bench's README is written from it. Versions differ from the registry images: Debian
bookworm's Python is 3.11.2 whatever ``python:3.x`` asks for, ``ubuntu:*`` gets Debian
bookworm (same package names for the common tools, different versions), and ``node:*``
gets bookworm's Node 18.
"""

from __future__ import annotations

import asyncio
import fnmatch
import hashlib
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from clawrl.sandbox import ImageBuildError, Podman, build_image

__all__ = [
    "APK_SHIM",
    "BASE_PACKAGES",
    "BASE_RECIPES",
    "BaseRecipe",
    "base_recipe_for",
    "ensure_base_image",
]

#: What every local base holds (Debian package names).
BASE_PACKAGES: tuple[str, ...] = (
    "bash",
    "ca-certificates",
    "coreutils",
    "curl",
    "git",
    "procps",
    "python-is-python3",
    "python3",
    "python3-pip",
    "python3-venv",
    "tmux",
)

#: Bumped when the finishing step below changes: the tag changes with it.
_FINISH_VERSION = "1"
_FINISH = """\
FROM {debootstrap}
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \\
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \\
    REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt \\
    NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt
COPY ca/ /usr/local/share/ca-certificates/
RUN update-ca-certificates >/dev/null \\
 && rm -f /usr/lib/python3*/EXTERNALLY-MANAGED \\
 && ln -sf pip3 /usr/bin/pip \\
 && mkdir -p /root /app /logs \\
 && python3 --version && pip --version
LABEL clawrl.base.recipe="{recipe}"
CMD ["sleep", "infinity"]
"""


#: ``apk`` on a Debian stand-in for ``alpine:*``: ``apk add`` installs the Debian packages
#: of the same names (a few Alpine names mapped), ``apk update`` is a no-op.
APK_SHIM = r"""#!/bin/sh
# clawrl: Alpine's apk on a Debian stand-in base (see clawrl.bench.base_images)
set -e
cmd="$1"; [ $# -gt 0 ] && shift
case "$cmd" in
  add|del)
    pkgs=""
    for a in "$@"; do
      case "$a" in
        -*) ;;
        build-base) pkgs="$pkgs build-essential" ;;
        py3-*) pkgs="$pkgs python3-${a#py3-}" ;;
        *) pkgs="$pkgs ${a%%[=<>~]*}" ;;
      esac
    done
    [ -n "$pkgs" ] || exit 0
    if [ "$cmd" = add ]; then
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $pkgs
    else
      apt-get remove -y -qq $pkgs
    fi ;;
  update|upgrade|cache|info) exit 0 ;;
  *) echo "apk $cmd: not supported by clawrl's apk shim" >&2; exit 1 ;;
esac
"""


@dataclass(frozen=True)
class BaseRecipe:
    """How a family of registry images is stood in for locally.

    Attributes:
        patterns: ``fnmatch`` patterns of image references (``python:3.*``); the registry
            host and ``docker.io/library/`` are stripped before matching.
        suite: Debian suite the base is bootstrapped from.
        extra_packages: Debian packages on top of :data:`BASE_PACKAGES`.
        differs: where the stand-in is not what the registry image is (for the README).
        apk_shim: install :data:`APK_SHIM` as ``/sbin/apk`` (the ``alpine:*`` stand-in).
    """

    patterns: tuple[str, ...]
    suite: str = "bookworm"
    extra_packages: tuple[str, ...] = ()
    differs: str = ""
    apk_shim: bool = False

    @property
    def packages(self) -> tuple[str, ...]:
        """Every Debian package of the base, sorted."""
        return tuple(sorted({*BASE_PACKAGES, *self.extra_packages}))

    @property
    def tag(self) -> str:
        """The local base's image tag (named by a digest of the recipe)."""
        key = (
            f"base{_FINISH_VERSION}|{self.suite}|{','.join(self.packages)}|{_host_cas_digest()}"
            + ("|apk" if self.apk_shim else "")
        )
        return f"localhost/clawrl-base:{self.suite}-{hashlib.sha256(key.encode()).hexdigest()[:10]}"


#: The host's extra trusted certificate authorities (Debian's local CA directory). A
#: machine whose egress goes through a TLS-inspecting proxy trusts its CA here; the local
#: bases trust the same ones, so that pip, apt, curl and npm reach the registries in
#: ``RUN`` steps as they do on the host. Public certificates only, no keys.
HOST_CA_DIR = Path("/usr/local/share/ca-certificates")


def _host_cas() -> list[Path]:
    if not HOST_CA_DIR.is_dir():
        return []
    return sorted(p for p in HOST_CA_DIR.rglob("*.crt") if p.is_file())


def _host_cas_digest() -> str:
    h = hashlib.sha256()
    for p in _host_cas():
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:12]


BASE_RECIPES: tuple[BaseRecipe, ...] = (
    BaseRecipe(
        ("python:*",),
        differs="Python 3.11.2 (Debian bookworm) whatever 3.x is asked for; pip 23.0; "
        "system site-packages, no /usr/local/bin/python",
    ),
    BaseRecipe(
        ("node:*",),
        extra_packages=("nodejs", "npm"),
        differs="Node 18 and npm 9 (Debian bookworm) whatever version is asked for",
    ),
    BaseRecipe(
        ("debian:bookworm*", "debian:12*", "debian:stable*", "debian:latest", "debian"),
        differs="the base tools above are added (debian:*-slim has no python3, curl, git)",
    ),
    BaseRecipe(
        ("debian:trixie*", "debian:13*", "debian:testing*"),
        suite="trixie",
        differs="trixie from the Debian mirror; the base tools above are added",
    ),
    BaseRecipe(
        ("ubuntu:*", "buildpack-deps:*"),
        differs="Debian bookworm, not Ubuntu: same apt package names for the common tools, "
        "other versions (e.g. Python 3.11, not 3.10 / 3.12)",
    ),
    BaseRecipe(
        ("alpine:*",),
        apk_shim=True,
        differs="Debian bookworm, not Alpine: glibc, not musl; `apk add X` is a shim over "
        "apt-get (same names, `py3-X` → `python3-X`, `build-base` → `build-essential`), so an "
        "Alpine-only package name fails the build",
    ),
    BaseRecipe(
        ("*",),
        differs="any other image: Debian bookworm with the base tools (may lack what the "
        "image had)",
    ),
)


def _normalise(ref: str) -> str:
    name = ref.strip()
    for prefix in ("docker.io/library/", "docker.io/", "index.docker.io/library/"):
        if name.startswith(prefix):
            name = name[len(prefix) :]
    return name.split("@", 1)[0]


def base_recipe_for(ref: str) -> BaseRecipe:
    """The recipe standing in for image reference ``ref`` (the last one matches anything)."""
    name = _normalise(ref)
    for recipe in BASE_RECIPES:
        if any(fnmatch.fnmatchcase(name, p) for p in recipe.patterns):
            return recipe
    return BASE_RECIPES[-1]


# one lock per event loop and base: an asyncio.Lock is bound to the loop it first waited in
_locks: dict[tuple[int, str], asyncio.Lock] = {}


async def ensure_base_image(
    recipe: BaseRecipe, podman: Podman, log: Callable[[str], None] | None = None
) -> str:
    """Build (once; cached as a podman image) the local base of ``recipe``; returns its tag.

    The debootstrap image comes from :func:`clawrl.sandbox.build_image` (Debian mirror,
    needs root and debootstrap); the finishing step is a ``podman build`` with network.

    Raises:
        ImageBuildError: debootstrap or the finishing build failed (with the log tail).
    """
    lock = _locks.setdefault((id(asyncio.get_running_loop()), recipe.tag), asyncio.Lock())
    async with lock:
        if (await podman.run("image", "exists", recipe.tag, check=False)).returncode == 0:
            return recipe.tag
        debootstrap = await build_image(
            suite=recipe.suite, packages=recipe.packages, podman=podman, log=log
        )
        with tempfile.TemporaryDirectory(prefix="clawrl-base-") as tmp:
            (Path(tmp) / "ca").mkdir()
            for i, cert in enumerate(_host_cas()):
                shutil.copyfile(cert, Path(tmp) / "ca" / f"host-{i}-{cert.name}")
            containerfile = Path(tmp) / "Containerfile"
            text = _FINISH.format(debootstrap=debootstrap, recipe=recipe.tag.split(":")[1])
            if recipe.apk_shim:
                (Path(tmp) / "apk").write_text(APK_SHIM)
                text += "COPY --chmod=0755 apk /sbin/apk\n"
            containerfile.write_text(text)
            res = await podman.run(
                "build", "--pull=never", "-t", recipe.tag, "-f", str(containerfile), tmp,
                check=False, timeout=900,
            )  # fmt: skip
        if res.returncode != 0:
            tail = (res.stdout + res.stderr).decode("utf-8", "replace")[-3000:]
            raise ImageBuildError(f"finishing the local base {recipe.tag} failed:\n{tail}")
        return recipe.tag


def main(argv: list[str] | None = None) -> int:
    """Build (or find) the local bases of the image references ``argv`` (default
    ``python:3``) and print their tags; returns 1 on failure (``tools/setup.sh`` runs it
    so that CI's first task image does not wait for debootstrap)."""
    import sys

    refs = (argv if argv is not None else sys.argv[1:]) or ["python:3"]

    async def build() -> list[str]:
        podman = Podman()
        return [await ensure_base_image(base_recipe_for(r), podman) for r in refs]

    try:
        for tag in asyncio.run(build()):
            print(tag)
    except ImageBuildError as exc:
        print(f"base image: {exc}", file=sys.stderr)
        return 1
    return 0
