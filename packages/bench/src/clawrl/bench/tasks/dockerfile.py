"""What a task's Dockerfile says without building it: its workspace (last ``WORKDIR``), the
``COPY``/``ADD`` sources that land in it, ``RUN`` lines and ``ENV`` values (Harbor and
Terminal-Bench 1 layouts)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path, PurePosixPath
from typing import Any

from clawrl.bench.errors import TaskLoadError
from clawrl.bench.task import WorkspaceSource
from clawrl.bench.tasks.files import read_text

__all__ = ["dockerfile_task_fields", "dockerfile_workspace"]


def _dockerfile_lines(text: str) -> list[str]:
    lines: list[str] = []
    buf = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            buf += stripped[:-1] + " "
            continue
        buf += stripped
        lines.append(buf.strip())
        buf = ""
    if buf.strip():
        lines.append(buf.strip())
    return lines


#: The PATH of the registry base images (and of clawrl's sandboxes): what ``$PATH`` means
#: in an ``ENV`` line when the Dockerfile did not set it before.
_BASE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}


_ENV_VAR = re.compile(r"\$\{(\w+)\}|\$(\w+)")


def _expand_env(value: str, env: dict[str, str]) -> str:
    """``$VAR`` / ``${VAR}`` in an ``ENV`` value, from the earlier ``ENV`` lines (then the
    base image's ``PATH``); an unknown variable becomes "" as in Docker."""

    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        return env.get(name, _BASE_ENV.get(name, ""))

    return _ENV_VAR.sub(one, value)


def _parse_dockerfile(root: Path, path: Path) -> dict[str, Any]:
    """Read the few Dockerfile instructions clawrl can honour without building the image."""
    text = read_text(root, str(path.relative_to(root)))
    image: str | None = None
    workdir = "/"
    seen_workdir = False
    copies: list[tuple[str, str, str]] = []  # (workdir at the time, src, dest)
    runs: list[str] = []
    env: dict[str, str] = {}
    for line in _dockerfile_lines(text):
        op, _, rest = line.partition(" ")
        op = op.upper()
        rest = rest.strip()
        if op == "FROM":
            image = rest.split()[0] if rest else None
        elif op == "WORKDIR":
            workdir = str(PurePosixPath(workdir) / rest)
            seen_workdir = True
        elif op in ("COPY", "ADD"):
            if rest.startswith("["):
                try:
                    parts = [str(p) for p in json.loads(rest)]
                except json.JSONDecodeError as exc:
                    raise TaskLoadError(root, f"Dockerfile: bad {op} line {line!r}") from exc
            else:
                parts = [p for p in shlex.split(rest) if not p.startswith("--")]
            if len(parts) < 2:
                raise TaskLoadError(root, f"Dockerfile: bad {op} line {line!r}")
            for src in parts[:-1]:
                copies.append((workdir, src, parts[-1]))
        elif op == "RUN":
            runs.append(rest)
        elif op == "ENV":
            if "=" in rest.split()[0] if rest else False:
                for item in shlex.split(rest):
                    key, _, value = item.partition("=")
                    env[key] = _expand_env(value, env)
            elif rest:
                key, _, value = rest.partition(" ")
                env[key] = _expand_env(value.strip(), env)
    return {
        "image": image,
        "workdir": workdir if seen_workdir else "/app",
        "copies": copies,
        "runs": runs,
        "env": env,
    }


def dockerfile_workspace(
    root: Path, dockerfile: Path, context: Path
) -> tuple[dict[str, Any], PurePosixPath, list[WorkspaceSource], list[str]]:
    """What a Dockerfile says about the workspace: its parsed lines, the workspace (last
    ``WORKDIR``, default ``/app``), the ``COPY``/``ADD`` sources (from ``context``) that land
    in it, and notes on those that land elsewhere (only the image build places them).

    A source that does not exist in ``context`` (a glob, or a file the task lacks) is only
    noted: the image build places it, or fails as that task's ``env-error``.

    Raises:
        TaskLoadError: the Dockerfile cannot be read, or a source lies outside ``context``.
    """
    parsed: dict[str, Any] = (
        _parse_dockerfile(root, dockerfile)
        if dockerfile.is_file()
        else {"image": None, "workdir": "/app", "copies": [], "runs": [], "env": {}}
    )
    workdir = PurePosixPath(parsed["workdir"])
    sources: list[WorkspaceSource] = []
    notes: list[str] = []
    context = context.resolve()
    where = context.relative_to(root.resolve()).as_posix() if context != root else "."
    for at, src, dest in parsed["copies"]:
        dest_path = PurePosixPath(at) / dest
        host = (context / src).resolve()
        if not host.is_relative_to(context):
            raise TaskLoadError(root, f"Dockerfile: COPY source {src!r} not in {where}/")
        if not host.exists():
            # a glob, or a file the task forgot: the image build places it or fails (an
            # env-error of this task, not a suite that cannot load)
            notes.append(f"COPY {src}: no such path in {where}/; left to the image build")
            continue
        if dest_path == workdir or workdir in dest_path.parents:
            rel = str(dest_path.relative_to(workdir)) or "."
            if host.is_file() and dest.endswith("/"):
                rel = str(PurePosixPath(rel) / host.name)
            sources.append(WorkspaceSource(src=host, dest=rel))
        else:
            notes.append(
                f"COPY {src} {dest_path}: outside the workspace {workdir}, placed only by the "
                "image build"
            )
    return parsed, workdir, sources, notes


def dockerfile_task_fields(root: Path, dockerfile: Path, context: Path) -> dict[str, Any]:
    """The :class:`~clawrl.bench.Task` fields a Dockerfile gives (see
    :func:`dockerfile_workspace`): ``workspace_path``, ``workspace_sources``, ``image``,
    ``setup_commands``, ``dockerfile`` (``None`` when there is none), ``env`` and
    ``notes``.

    Raises:
        TaskLoadError: see :func:`dockerfile_workspace`.
    """
    parsed, workdir, sources, notes = dockerfile_workspace(root, dockerfile, context)
    return {
        "workspace_path": str(workdir),
        "workspace_sources": tuple(sources),
        "image": parsed["image"],
        "setup_commands": tuple(parsed["runs"]),
        "dockerfile": dockerfile if dockerfile.is_file() else None,
        "env": parsed["env"],
        "notes": tuple(notes),
    }
