"""Validation of an HF causal-LM directory for the model kit (``check_model_dir``): supported
architecture, weights, tokenizer and a chat template the proxy renders."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from clawrl.proxy.model_spec import (
    SUPPORTED_ARCHITECTURES,
    InvalidModelDirError,
    UnsupportedArchitectureError,
)

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
    cfg = _read_config(root)
    model_type, architectures = _supported_architecture(root, cfg)
    weights = [*root.glob("*.safetensors"), *root.glob("pytorch_model*.bin")]
    if not weights:
        raise InvalidModelDirError(f"{root} has no weights (*.safetensors)")
    renderer, supports_tools = _probe_chat_template(root)
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
        "supports_tools": supports_tools,
        "weights_bytes": sum(p.stat().st_size for p in weights),
    }


def _read_config(root: Path) -> dict[str, Any]:
    """``root/config.json`` as a dict (``InvalidModelDirError`` when missing or invalid)."""
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
    return cfg


def _supported_architecture(root: Path, cfg: dict[str, Any]) -> tuple[str, list[str]]:
    """``(model_type, architectures)`` of a config whose ``model_type`` is supported and
    whose ``architectures`` name its class (``UnsupportedArchitectureError`` otherwise)."""
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
    return model_type, architectures


def _probe_chat_template(root: Path) -> tuple[Any, bool]:
    """The proxy's renderer of ``root`` and whether its chat template puts a probe tool in
    the prompt (``InvalidModelDirError`` when the tokenizer or template is unusable)."""
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
    # the template's own tool support (the proxy injects a tool prompt where it has none)
    own = getattr(renderer, "template_has_tools", True)
    return renderer, own and "clawrl_probe_tool_x7" in with_tools and with_tools != plain
