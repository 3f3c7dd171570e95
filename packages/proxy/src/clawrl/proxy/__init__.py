"""Serving proxy at the model boundary: OpenAI/Anthropic APIs, token-exact capture, inference backends."""

from typing import TYPE_CHECKING

# A module whose whole public set (its ``__all__``) is public here is star-imported and its
# ``__all__`` spliced into ours, so each name is listed once, where it is defined; from the
# other modules only the names below are re-exported.
from clawrl.proxy import app as _app
from clawrl.proxy import capture as _capture
from clawrl.proxy import client as _client
from clawrl.proxy import parse as _parse
from clawrl.proxy import record as _record
from clawrl.proxy import server as _server
from clawrl.proxy import serving as _serving
from clawrl.proxy import session as _session
from clawrl.proxy import speed as _speed
from clawrl.proxy.app import *  # noqa: F403
from clawrl.proxy.backends import base as _backends
from clawrl.proxy.backends.base import *  # noqa: F403
from clawrl.proxy.backends.sglang import SGLangBackend
from clawrl.proxy.backends.sglang_router import SGLangRouterBackend, WorkerStatus
from clawrl.proxy.capture import *  # noqa: F403
from clawrl.proxy.client import *  # noqa: F403
from clawrl.proxy.core import ChatCall, ProxyCore, TrainingSampling
from clawrl.proxy.errors import (
    AuthenticationError,
    BackendUnavailableError,
    CaptureError,
    ContextLengthExceededError,
    NotFoundError,
    PayloadTooLargeError,
    ProxyAdminError,
    ProxyError,
    ProxyRequestError,
    SessionClosedError,
    SessionNotFoundError,
    UnsupportedParameterError,
)
from clawrl.proxy.extras import MissingExtraError
from clawrl.proxy.model_fetch import (
    KNOWN_MODELS,
    check_model_dir,
    fetch_model,
    list_models,
    resolve_model,
)
from clawrl.proxy.model_kit import DefaultModelSpec, ModelKitError, build_default_model
from clawrl.proxy.parse import *  # noqa: F403
from clawrl.proxy.record import *  # noqa: F403
from clawrl.proxy.render import ChatRenderer
from clawrl.proxy.server import *  # noqa: F403
from clawrl.proxy.serving import *  # noqa: F403
from clawrl.proxy.session import *  # noqa: F403
from clawrl.proxy.sglang_launcher import SGLangServer, launch_sglang
from clawrl.proxy.sglang_router_launcher import (
    SGLangCluster,
    launch_sglang_cluster,
    launch_sglang_router,
)
from clawrl.proxy.speed import *  # noqa: F403

if TYPE_CHECKING:  # at run time loaded lazily by __getattr__ (it imports torch)
    from clawrl.proxy.backends.embedded import EmbeddedBackend

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # EmbeddedBackend imports torch: loaded on first use, not with the package.
    if name == "EmbeddedBackend":
        from clawrl.proxy.backends.embedded import EmbeddedBackend

        return EmbeddedBackend
    raise AttributeError(f"module 'clawrl.proxy' has no attribute {name!r}")


__all__ = [
    "KNOWN_MODELS",
    "AuthenticationError",
    "BackendUnavailableError",
    "CaptureError",
    "ChatCall",
    "ChatRenderer",
    "ContextLengthExceededError",
    "DefaultModelSpec",
    "EmbeddedBackend",
    "MissingExtraError",
    "ModelKitError",
    "NotFoundError",
    "PayloadTooLargeError",
    "ProxyAdminError",
    "ProxyCore",
    "ProxyError",
    "ProxyRequestError",
    "SGLangBackend",
    "SGLangCluster",
    "SGLangRouterBackend",
    "SGLangServer",
    "SessionClosedError",
    "SessionNotFoundError",
    "TrainingSampling",
    "UnsupportedParameterError",
    "WorkerStatus",
    "__version__",
    "build_default_model",
    "check_model_dir",
    "fetch_model",
    "launch_sglang",
    "launch_sglang_cluster",
    "launch_sglang_router",
    "list_models",
    "resolve_model",
    *_app.__all__,
    *_backends.__all__,
    *_capture.__all__,
    *_client.__all__,
    *_parse.__all__,
    *_record.__all__,
    *_server.__all__,
    *_serving.__all__,
    *_session.__all__,
    *_speed.__all__,
]
