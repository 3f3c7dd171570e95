"""Serving proxy at the model boundary: OpenAI/Anthropic APIs, token-exact capture, inference backends."""

from typing import TYPE_CHECKING

from clawrl.proxy.app import ProxyApp
from clawrl.proxy.backends.base import (
    BackendError,
    GenerationRequest,
    GenerationResult,
    InferenceBackend,
    SamplingParams,
    TokenDelta,
)
from clawrl.proxy.backends.null import NullBackend
from clawrl.proxy.backends.scripted import ScriptedBackend, ScriptedCompletion
from clawrl.proxy.backends.sglang import SGLangBackend
from clawrl.proxy.capture import (
    CaptureWriter,
    SkippedLines,
    iter_records,
    read_records,
    session_capture_path,
)
from clawrl.proxy.client import AdminClient, AsyncAdminClient, SessionInfo
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
from clawrl.proxy.model_fetch import (
    KNOWN_MODELS,
    check_model_dir,
    fetch_model,
    list_models,
    resolve_model,
)
from clawrl.proxy.model_kit import ModelKitError, build_default_model
from clawrl.proxy.parse import (
    ParsedCompletion,
    ParsedToolCall,
    format_assistant_text,
    parse_completion,
)
from clawrl.proxy.record import (
    FINISH_REASONS,
    CallRecord,
    CallTiming,
    CallUsage,
    ParsedCall,
    PromptRelation,
)
from clawrl.proxy.render import ChatRenderer
from clawrl.proxy.server import ProxyServer, ServerConfig, build_proxy_app
from clawrl.proxy.serving import (
    BackendConfig,
    ModelEndpoint,
    ProxyStartError,
    make_backend,
    serve,
)
from clawrl.proxy.session import Session, SessionManager, call_seed
from clawrl.proxy.sglang_launcher import SGLangServer, launch_sglang

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
    "FINISH_REASONS",
    "KNOWN_MODELS",
    "AdminClient",
    "AsyncAdminClient",
    "AuthenticationError",
    "BackendConfig",
    "BackendError",
    "BackendUnavailableError",
    "CallRecord",
    "CallTiming",
    "CallUsage",
    "CaptureError",
    "CaptureWriter",
    "ChatCall",
    "ChatRenderer",
    "ContextLengthExceededError",
    "EmbeddedBackend",
    "GenerationRequest",
    "GenerationResult",
    "InferenceBackend",
    "ModelEndpoint",
    "ModelKitError",
    "NotFoundError",
    "NullBackend",
    "ParsedCall",
    "ParsedCompletion",
    "ParsedToolCall",
    "PayloadTooLargeError",
    "PromptRelation",
    "ProxyAdminError",
    "ProxyApp",
    "ProxyCore",
    "ProxyError",
    "ProxyRequestError",
    "ProxyServer",
    "ProxyStartError",
    "SGLangBackend",
    "SGLangServer",
    "SamplingParams",
    "ScriptedBackend",
    "ScriptedCompletion",
    "ServerConfig",
    "Session",
    "SessionClosedError",
    "SessionInfo",
    "SessionManager",
    "SessionNotFoundError",
    "SkippedLines",
    "TokenDelta",
    "TrainingSampling",
    "UnsupportedParameterError",
    "__version__",
    "build_default_model",
    "build_proxy_app",
    "call_seed",
    "check_model_dir",
    "fetch_model",
    "format_assistant_text",
    "iter_records",
    "launch_sglang",
    "list_models",
    "make_backend",
    "parse_completion",
    "read_records",
    "resolve_model",
    "serve",
    "session_capture_path",
]
