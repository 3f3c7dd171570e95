"""Weights I/O of the embedded backend: loading the model, reading an HF checkpoint's safetensors and copying a
state dict into the model after checking keys and shapes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from clawrl.proxy.backends.base import BackendError

__all__ = ["WeightLoadError", "load_model"]


class WeightLoadError(BackendError):
    """Weights could not be loaded (missing files, unknown or missing keys, shape mismatch).
    The model keeps its previous weights and policy version."""


def _read_safetensors_dir(path: Path) -> dict[str, torch.Tensor]:
    """All tensors of the ``*.safetensors`` files of an HF checkpoint directory (CPU)."""
    from safetensors.torch import load_file

    if not path.is_dir():
        raise WeightLoadError(f"weights directory not found: {path}")
    index = path / "model.safetensors.index.json"
    if index.is_file():
        files = sorted({path / f for f in json.loads(index.read_text())["weight_map"].values()})
    else:
        files = sorted(path.glob("*.safetensors"))
    if not files:
        raise WeightLoadError(f"no *.safetensors files in {path}")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            state.update(load_file(str(file), device="cpu"))
        except Exception as exc:
            raise WeightLoadError(f"cannot read {file}: {exc}") from exc
    return state


def _load_into(model: Any, state: dict[str, torch.Tensor]) -> None:
    """Copy ``state`` into ``model`` after checking keys and shapes (all or nothing)."""
    own = model.state_dict()
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    unknown = sorted(set(state) - set(own))
    missing = sorted(set(own) - set(state))
    if tied:
        missing = [k for k in missing if k != "lm_head.weight"]
    if unknown or missing:
        raise WeightLoadError(
            f"state dict mismatch: unknown keys {unknown[:5]}, missing {missing[:5]}"
        )
    for key, tensor in state.items():
        if tuple(tensor.shape) != tuple(own[key].shape):
            raise WeightLoadError(
                f"shape mismatch for {key}: got {tuple(tensor.shape)}, model has {tuple(own[key].shape)}"
            )
    if (
        tied
        and "lm_head.weight" in state
        and "model.embed_tokens.weight" in state
        and not torch.equal(state["lm_head.weight"].cpu(), state["model.embed_tokens.weight"].cpu())
    ):
        raise WeightLoadError("the model ties lm_head to embed_tokens but the weights differ")
    with torch.no_grad():
        for key, tensor in state.items():
            own[key].copy_(tensor.detach())


def load_model(
    model_dir: Path,
    dtype: torch.dtype,
    attn_implementation: str,
    device: torch.device,
    max_context: int | None = None,
) -> tuple[Any, str]:
    """The HF causal LM of ``model_dir`` on ``device``, in eval mode without gradients, and
    the name of its forward's cache argument (``"cache"`` or ``"past_key_values"``).

    Raises:
        WeightLoadError: the model has sliding-window layers (Qwen2/Qwen3
            ``use_sliding_window``) whose window is shorter than ``max_context``: the engine's
            cache mask attends fully, so its logprobs would not be the model's (the trainer's
            tree forward windows them); serve with ``max_context`` <= the window.
    """
    import inspect

    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model: Any = AutoModelForCausalLM.from_pretrained(
            str(model_dir), dtype=dtype, attn_implementation=attn_implementation
        )
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    cfg = model.config
    window = getattr(cfg, "sliding_window", None)
    sliding = "sliding_attention" in (getattr(cfg, "layer_types", None) or ())
    if sliding and window and (max_context is None or max_context > int(window)):
        raise WeightLoadError(
            f"sliding-window layers (window {window}) are not windowed by the embedded "
            f"engine; use max_context <= {window}"
        )
    model.to(device)
    model.eval()
    model.requires_grad_(False)
    params = inspect.signature(model.forward).parameters
    return model, "cache" if "cache" in params else "past_key_values"
