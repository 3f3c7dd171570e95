"""LoRA training with peft: adapters on the policy, the reference without them, merged weights.

:func:`add_lora` injects peft's LoRA layers into a transformers causal LM in place
(``peft.get_peft_model``): the base weights are frozen, only the adapters train. The model
keeps its class, so the tree forward (:func:`~clawrl.rl_core.tree_forward`) runs unchanged.

* KL reference: :class:`AdapterDisabledReference`, the same model run inside peft's
  ``disable_adapter()``, i.e. the base weights — no second copy of the model.
* Weight sync: :func:`merged_state_dict` is the model's state dict in the plain
  transformers layout, each adapted weight replaced by ``W + scale · B A`` (peft's
  ``get_delta_weight``), computed into new tensors: the trainer's weights are not touched
  (an in-place ``merge_adapter`` / ``unmerge_adapter`` would add and subtract the update,
  leaving float rounding in the frozen base each sync). A model without adapters gives its
  ordinary state dict.

peft is the ``lora`` extra of clawrl-rl-core (``pip install clawrl-rl-core[lora]``).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from clawrl.rl_core.config import LoRAConfig
from clawrl.rl_core.errors import ConfigError
from clawrl.rl_core.forward import TreeForwardOutput, TreeModel
from torch import Tensor, nn

__all__ = [
    "AdapterDisabledReference",
    "add_lora",
    "has_lora",
    "lora_parameters",
    "merged_state_dict",
]


def _peft() -> Any:
    try:
        import peft
    except ImportError:  # pragma: no cover - the extra is part of the dev install
        raise ConfigError(
            "[algo] lora needs peft: install clawrl-rl-core[lora] (pip install peft)"
        ) from None
    return peft


def add_lora(model: nn.Module, config: LoRAConfig) -> nn.Module:
    """Inject LoRA adapters into ``model`` (in place) and freeze everything else.

    Returns:
        the ``peft.PeftModel`` around ``model`` (for ``disable_adapter()``); ``model``
        itself now holds the adapter layers and still forwards as before.

    Raises:
        ConfigError: no module of the model matches ``config.target_modules``.
    """
    peft = _peft()
    lora_config = peft.LoraConfig(
        r=config.r,
        lora_alpha=config.alpha,
        lora_dropout=config.dropout,
        target_modules=config.target_modules,
        bias="none",
    )
    try:
        with warnings.catch_warnings():
            # peft reads transformers' deprecated ``is_gradient_checkpointing`` property
            warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated")
            return peft.get_peft_model(model, lora_config)
    except ValueError as exc:  # peft: "Target modules {...} not found in the base model"
        raise ConfigError(f"[algo] lora.target_modules: {exc}".splitlines()[0]) from None


def _lora_layers(model: nn.Module) -> Iterator[tuple[str, Any]]:
    if not has_lora(model):
        return
    from peft.tuners.lora import LoraLayer

    for name, module in model.named_modules():
        if isinstance(module, LoraLayer):
            yield name, module


def has_lora(model: nn.Module) -> bool:
    """Whether ``model`` holds peft LoRA layers (False also when peft is not installed)."""
    try:
        from peft.tuners.lora import LoraLayer
    except ImportError:
        return False
    return any(isinstance(m, LoraLayer) for m in model.modules())


def lora_parameters(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """The adapters' parameters (``lora_A`` / ``lora_B``) of ``model``, by name."""
    return [(n, p) for n, p in model.named_parameters() if ".lora_" in n]


@torch.no_grad()
def merged_state_dict(model: nn.Module) -> dict[str, Tensor]:
    """``model``'s weights in the layout of the model without adapters (the keys
    ``save_pretrained`` and the inference backends expect): each adapted layer's weight is
    ``W + scale · B A`` of its active adapters (new tensors; ``model`` is not changed),
    the adapters' own tensors are left out. Without adapters: ``model.state_dict()``
    (detached)."""
    state = model.state_dict()
    layers = dict(_lora_layers(model))
    if not layers:
        return {k: v.detach() for k, v in state.items()}
    out: dict[str, Tensor] = {}
    for key, value in state.items():
        if ".lora_" in key:
            continue
        out[key.replace(".base_layer.", ".")] = value.detach()
    for name, layer in layers.items():
        weight = layer.get_base_layer().weight
        if layer.merged or getattr(layer, "disable_adapters", False):
            merged = weight.detach()  # merged in place already, or switched off
        else:
            merged = weight.detach().clone()
            for adapter in layer.active_adapters:
                if adapter in layer.lora_A:
                    merged += layer.get_delta_weight(adapter).to(merged.dtype)
        out[f"{name}.weight" if name else "weight"] = merged
    return out


@contextmanager
def _adapters_disabled(peft_model: Any) -> Iterator[None]:
    with peft_model.disable_adapter():
        yield


class AdapterDisabledReference(TreeModel):
    """The KL reference of a LoRA policy: the policy's own modules run with the adapters
    disabled (peft's ``disable_adapter()``), i.e. the frozen base weights. Shares the
    policy's parameters (nothing is copied); only ever run without gradients.

    Args:
        peft_model: what :func:`add_lora` returned for the policy.
    """

    def __init__(self, peft_model: nn.Module) -> None:
        super().__init__(peft_model.get_base_model())  # type: ignore[operator]
        self.__dict__["_peft_model"] = peft_model  # not a submodule: no second registration

    def forward(self, *args: Any, **kwargs: Any) -> TreeForwardOutput:
        with _adapters_disabled(self.__dict__["_peft_model"]):
            return super().forward(*args, **kwargs)
