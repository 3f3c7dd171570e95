"""Build a task's image from its Dockerfile, offline: ``podman build`` with local bases.

:func:`build_task_image` takes a task directory's Dockerfile (Harbor / Terminal-Bench:
``environment/Dockerfile``, the build context its directory) and

1. replaces every ``FROM`` that names an image podman does not have locally (no registry is
   reachable) by the local base of :func:`~clawrl.bench.base_images.base_recipe_for`
   (built once, cached), keeping ``AS <stage>``; ``FROM <earlier stage>`` and images that
   exist locally are kept; ``ARG`` defaults before the first ``FROM`` are expanded in it;
2. names the image by a digest of the rewritten Dockerfile and of every file of the context
   (path, executable bit, contents): ``localhost/clawrl-task:<digest>``; an image of that
   name is reused at once (a second rollout, a second run);
3. otherwise runs ``podman build --pull=never --layers=false`` on the context (no layer
   cache: every step's output is in the log) — ``RUN`` steps get podman's default build
   network (the package registries are reachable: apt-get, pip, npm work), and ``ENV``
   (with ``$VAR`` expansion), ``ARG``, ``WORKDIR``, ``COPY``/``ADD`` and ``USER`` are
   podman's own;
4. reads the image's configuration back (its ``Env`` — already expanded — its
   ``WorkingDir`` and ``User``) for the sandboxes that run it.

A failed build raises :class:`TaskImageError` with the tail of the build log; the rollout
runner reports it as an ``env-error`` (kept out of scores, counted). So does a build that
exited 0 but whose log shows a step that could not resolve its host (``curl -sSf
https://sh.rustup.rs | sh`` succeeds as a pipe and installs nothing): its image is removed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from clawrl.bench.base_images import base_recipe_for, ensure_base_image
from clawrl.bench.errors import BenchError
from clawrl.sandbox import ImageBuildError, Podman, PodmanError

__all__ = ["TaskImage", "TaskImageError", "build_task_image", "rewrite_froms", "task_image_tag"]

#: Bumped when the way images are built changes, so that old tags are not reused.
TASK_IMAGE_VERSION = "3"
_TAIL_CHARS = 4000
_FROM = re.compile(r"^(?P<lead>\s*FROM\s+)(?P<rest>.*)$", re.IGNORECASE)
_ARG = re.compile(r"^\s*ARG\s+(?P<name>\w+)(?:=(?P<value>\S*))?\s*$", re.IGNORECASE)
_VAR = re.compile(r"\$\{(\w+)(?::?-([^}]*))?\}|\$(\w+)")
#: Name-resolution failures of curl, wget, git and Python in a build log.
_UNREACHABLE = re.compile(
    r"Could not resolve host:?[^\n]*|unable to resolve host address[^\n]*"
    r"|Temporary failure in name resolution[^\n]*"
)


class TaskImageError(BenchError):
    """A task's image could not be built.

    Attributes:
        reason: what failed, one line.
        log_tail: the last 4000 characters of the build log.
    """

    def __init__(self, reason: str, log_tail: str = "") -> None:
        self.reason = reason
        self.log_tail = log_tail
        super().__init__(f"{reason}\n{log_tail}" if log_tail else reason)


@dataclass(frozen=True)
class TaskImage:
    """A built task image and what its sandboxes need from its configuration.

    Attributes:
        tag: ``localhost/clawrl-task:<digest>``.
        env: the image's environment (``ENV`` lines, expanded by podman).
        workdir: the image's working directory (``""`` if none).
        user: the image's ``USER`` (``""`` if none).
        substituted: ``FROM`` reference -> local base tag, for each replaced ``FROM``.
        cached: whether the image already existed (nothing was built).
        build_s: seconds spent building (0 when cached).
    """

    tag: str
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = ""
    user: str = ""
    substituted: dict[str, str] = field(default_factory=dict)
    cached: bool = False
    build_s: float = 0.0


def _expand(text: str, args: dict[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(3)
        default = m.group(2) or ""
        return args.get(name, default) or default

    return _VAR.sub(one, text)


def _logical_starts(lines: list[str]) -> list[int]:
    """Indices of the lines that start an instruction (not continuations, comments, blanks)."""
    starts, continued = [], False
    for i, line in enumerate(lines):
        stripped = line.strip()
        if not continued and stripped and not stripped.startswith("#"):
            starts.append(i)
        if stripped.startswith("#") and not continued:
            continue
        continued = stripped.endswith("\\")
    return starts


def rewrite_froms(text: str, substitute: Callable[[str], str | None]) -> tuple[str, dict[str, str]]:
    """``text`` with each ``FROM <ref>`` that ``substitute(ref)`` maps to a tag rewritten.

    ``ref`` has the ``ARG`` defaults declared before the first ``FROM`` expanded; stage
    names (``AS x``) are kept, and a ``FROM`` naming an earlier stage is never passed to
    ``substitute``. Returns the new text and the map ref -> tag of what was replaced.

    Raises:
        TaskImageError: a ``FROM`` line without an image, or with a continuation line.
    """
    lines = text.splitlines()
    args: dict[str, str] = {}
    stages: set[str] = set()
    seen_from = False
    done: dict[str, str] = {}
    for i in _logical_starts(lines):
        line = lines[i]
        arg = _ARG.match(line)
        if arg and not seen_from:
            args[arg["name"]] = _expand(arg["value"] or "", args)
            continue
        m = _FROM.match(line)
        if m is None:
            continue
        seen_from = True
        if line.rstrip().endswith("\\"):
            raise TaskImageError(f"Dockerfile: a FROM line continued on the next line: {line!r}")
        words = m["rest"].split()
        flags = [w for w in words if w.startswith("--")]
        rest = [w for w in words if not w.startswith("--")]
        if not rest:
            raise TaskImageError(f"Dockerfile: FROM without an image: {line!r}")
        ref = _expand(rest[0], args)
        is_stage = ref in stages
        if len(rest) >= 3 and rest[1].lower() == "as":
            stages.add(rest[2])
        if is_stage:
            continue
        tag = substitute(ref)
        if tag is None:
            continue
        done[ref] = tag
        kept_flags = [f for f in flags if not f.startswith("--platform")]
        lines[i] = m["lead"] + " ".join([*kept_flags, tag, *rest[1:]])
    return "\n".join(lines) + "\n", done


def _context_digest(context: Path, dockerfile_text: str, base_ids: Sequence[str] = ()) -> str:
    """sha256 over the build recipe, the ids of its base images (a rebuilt local base makes a
    new task image) and every entry of the context (path, x bit, bytes; a symlink, to a file
    or to a directory, by its target: ``COPY`` copies the link, not what it points to)."""
    h = hashlib.sha256(f"{TASK_IMAGE_VERSION}\0{dockerfile_text}\0".encode())
    for base in base_ids:
        h.update(f"B\0{base}\0".encode())
    for dirpath, dirnames, filenames in os.walk(context):
        dirnames.sort()
        # os.walk lists a symlink to a directory among dirnames and does not descend it
        for name in sorted(d for d in dirnames if (Path(dirpath) / d).is_symlink()):
            path = Path(dirpath) / name
            rel = path.relative_to(context).as_posix()
            h.update(f"L\0{rel}\0{os.readlink(path)}\0".encode())
        for name in sorted(filenames):
            path = Path(dirpath) / name
            rel = path.relative_to(context).as_posix()
            if path.is_symlink():
                h.update(f"L\0{rel}\0{os.readlink(path)}\0".encode())
            elif path.is_file():
                mode = "x" if os.access(path, os.X_OK) else "-"
                h.update(f"F\0{rel}\0{mode}\0".encode())
                h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def task_image_tag(digest: str) -> str:
    """The tag of the task image with context digest ``digest``."""
    return f"localhost/clawrl-task:{digest[:16]}"


async def _inspect(podman: Podman, tag: str) -> dict[str, object]:
    res = await podman.run("image", "inspect", tag, "--format", "{{json .Config}}")
    config = json.loads(res.stdout.decode("utf-8", "replace") or "{}")
    return config if isinstance(config, dict) else {}


def _from_refs(text: str) -> list[str]:
    """The images the Dockerfile's ``FROM`` lines name (not earlier stages), in order."""
    refs: list[str] = []

    def collect(ref: str) -> None:
        refs.append(ref)

    rewrite_froms(text, collect)
    return refs


async def _base_ids(text: str, podman: Podman) -> list[str]:
    """The image ids of the (rewritten) Dockerfile's ``FROM`` images, in order."""
    ids = []
    for ref in _from_refs(text):
        res = await podman.run("image", "inspect", ref, "--format", "{{.Id}}", check=False)
        ids.append(res.stdout.decode("utf-8", "replace").strip() if res.returncode == 0 else ref)
    return ids


async def _local_bases(text: str, podman: Podman) -> tuple[str, dict[str, str]]:
    """The Dockerfile with unpullable ``FROM`` s replaced, building the bases they need."""
    tags: dict[str, str] = {}
    for ref in _from_refs(text):
        if (await podman.run("image", "exists", ref, check=False)).returncode == 0:
            continue
        try:
            tags[ref] = await ensure_base_image(base_recipe_for(ref), podman)
        except ImageBuildError as exc:
            tail = str(exc)[-_TAIL_CHARS:]
            raise TaskImageError(f"local base for FROM {ref} failed", tail) from exc
    return rewrite_froms(text, tags.get)


async def build_task_image(
    dockerfile: Path, context: Path, podman: Podman, *, timeout_s: float = 1800.0
) -> TaskImage:
    """Build (or find cached) the image of ``dockerfile`` with build context ``context``.

    See the module docstring for the steps.

    Raises:
        TaskImageError: the Dockerfile cannot be read or parsed, a local base or the build
            failed, a build step could not resolve its host (``Could not resolve host``,
            ``unable to resolve host address``, ``Temporary failure in name resolution``
            in the log of a build that exited 0), or the build ran past ``timeout_s`` —
            with the log tail.
    """
    try:
        text = dockerfile.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskImageError(f"cannot read {dockerfile}: {exc}") from exc
    rewritten, substituted = await _local_bases(text, podman)
    tag = task_image_tag(_context_digest(context, rewritten, await _base_ids(rewritten, podman)))
    cached = (await podman.run("image", "exists", tag, check=False)).returncode == 0
    t0 = time.time()
    if not cached:
        with tempfile.TemporaryDirectory(prefix="clawrl-taskimg-") as tmp:
            path = Path(tmp) / "Dockerfile"
            path.write_text(rewritten, encoding="utf-8")
            try:
                # --layers=false: no step output is hidden behind "Using cache" (the
                # unreachable-host check below reads every RUN step's output)
                res = await podman.run(
                    "build", "--pull=never", "--layers=false", "--force-rm", "-t", tag,
                    "-f", str(path), str(context), check=False, timeout=timeout_s,
                )  # fmt: skip
            except PodmanError as exc:
                raise TaskImageError(f"podman build of {dockerfile} failed: {exc}") from exc
        log = (res.stdout + res.stderr).decode("utf-8", "replace")
        if res.returncode != 0:
            raise TaskImageError(
                f"podman build of {dockerfile} exited {res.returncode}", log[-_TAIL_CHARS:]
            )
        unreachable = _UNREACHABLE.search(log)
        if unreachable is not None:
            # e.g. ``curl … | sh`` from a host this machine does not reach: the step
            # "succeeded" (a pipe hides curl's failure) but installed nothing
            await podman.run("rmi", "-f", tag, check=False)
            raise TaskImageError(
                f"a build step of {dockerfile} could not reach its host "
                f"({unreachable.group(0).strip()}; only the package registries are "
                "reachable here): the image would lack what that step installs",
                log[-_TAIL_CHARS:],
            )
    config = await _inspect(podman, tag)
    raw_env = config.get("Env")
    env: dict[str, str] = {}
    for item in raw_env if isinstance(raw_env, list) else []:
        key, _, value = str(item).partition("=")
        env[key] = value
    return TaskImage(
        tag=tag,
        env=env,
        workdir=str(config.get("WorkingDir") or ""),
        user=str(config.get("User") or ""),
        substituted=substituted,
        cached=cached,
        build_s=0.0 if cached else time.time() - t0,
    )
