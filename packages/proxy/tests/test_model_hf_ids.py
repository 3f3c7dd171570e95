"""A Hugging Face id naming a kit model (``Qwen/Qwen2.5-Coder-0.5B-Instruct``) resolves to
that kit model, as its kit name does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clawrl.proxy import KNOWN_MODELS, list_models, resolve_model
from clawrl.proxy.model_fetch import FETCH_FORMAT, MANIFEST_NAME, known_model
from clawrl.proxy.model_spec import InvalidModelDirError

QWEN = "qwen2.5-coder-0.5b-instruct"


def test_known_model_by_kit_name_or_hf_id() -> None:
    spec = KNOWN_MODELS[QWEN]
    assert known_model(QWEN) is spec
    assert known_model("Qwen/Qwen2.5-Coder-0.5B-Instruct") is spec
    assert known_model("qwen/qwen2.5-coder-0.5b-instruct") is spec  # hub ids ignore case
    assert (
        known_model("HuggingFaceTB/SmolLM2-135M-Instruct") is KNOWN_MODELS["smollm2-135m-instruct"]
    )
    assert known_model("Qwen/Qwen3-8B") is None
    assert {r["name"]: r["hf_id"] for r in list_models()}[QWEN] == spec.hf_id


def test_resolve_model_takes_an_hf_id(tmp_path: Path) -> None:
    """A cached kit model (its manifest, config and weights as a fetch leaves them) is
    found by its Hugging Face id without fetching anything."""
    spec = KNOWN_MODELS[QWEN]
    entry = tmp_path / spec.name
    entry.mkdir()
    manifest = {"format": FETCH_FORMAT, "gguf": {"sha256": spec.sha256}}
    (entry / MANIFEST_NAME).write_text(json.dumps(manifest))
    (entry / "config.json").write_text("{}")
    (entry / "model.safetensors").write_bytes(b"")
    assert resolve_model("Qwen/Qwen2.5-Coder-0.5B-Instruct", cache_dir=tmp_path) == entry
    with pytest.raises(InvalidModelDirError, match="not a directory"):
        resolve_model("Qwen/Qwen3-8B", cache_dir=tmp_path)
