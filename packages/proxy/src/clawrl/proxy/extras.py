"""The optional parts of the proxy and the error naming the extra that installs one.

``pip install clawrl-proxy`` serves an SGLang server (and the scripted and null test
backends); ``pip install 'clawrl-proxy[embedded]'`` adds torch, transformers and gguf for the
in-process backend and the model kit (building the tiny model, fetching real ones).
"""

from __future__ import annotations

import importlib.util

from clawrl.proxy.model_kit import ModelKitError
from clawrl.proxy.serving import ProxyStartError

__all__ = ["EMBEDDED_MODULES", "MissingExtraError", "require_extra"]

#: the modules ``[embedded]`` installs that the embedded backend and the model kit import
EMBEDDED_MODULES = ("torch", "transformers", "safetensors")


class MissingExtraError(ModelKitError, ProxyStartError):
    """A feature was asked for whose optional dependencies are not installed."""


def require_extra(
    feature: str, extra: str = "embedded", modules: tuple[str, ...] = EMBEDDED_MODULES
) -> None:
    """Raise :class:`MissingExtraError` naming ``extra`` when one of ``modules`` is missing.

    ``feature`` names what was asked for, e.g. ``"the embedded backend"``.
    """
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise MissingExtraError(
            f"{feature} needs the '{extra}' extra ({', '.join(missing)} not installed): "
            f"pip install 'clawrl-proxy[{extra}]'"
        )
