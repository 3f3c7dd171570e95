"""Typed errors of clawrl-proxy.

Every error a client can cause maps to one HTTP status and one error ``type`` and is rendered
in the shape of the API the client spoke (see :func:`openai_error_body`,
:func:`anthropic_error_body`). Nothing a client sends may produce a 500.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AuthenticationError",
    "BackendUnavailableError",
    "CaptureError",
    "ContextLengthExceededError",
    "NotFoundError",
    "PayloadTooLargeError",
    "ProxyAdminError",
    "ProxyError",
    "ProxyRequestError",
    "SessionClosedError",
    "SessionNotFoundError",
    "UnsupportedParameterError",
    "anthropic_error_body",
    "openai_error_body",
]


class ProxyError(Exception):
    """Base of every error raised by clawrl-proxy.

    Attributes:
        status: HTTP status code sent to the client.
        error_type: the error ``type`` of the OpenAI / Anthropic error object.
        code: a short machine-readable code (OpenAI's ``code`` field).
        param: the request field at fault, when known.
    """

    status: int = 500
    error_type: str = "api_error"
    anthropic_type: str = "api_error"
    code: str = "internal_error"

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code


class ProxyRequestError(ProxyError):
    """The request is malformed or asks for something the proxy cannot do (HTTP 400)."""

    status = 400
    error_type = "invalid_request_error"
    anthropic_type = "invalid_request_error"
    code = "invalid_request"


class UnsupportedParameterError(ProxyRequestError):
    """A well-formed parameter whose value the proxy does not support (e.g. ``n`` > 1)."""

    code = "unsupported_parameter"


class ContextLengthExceededError(ProxyRequestError):
    """The rendered prompt leaves no room for a single completion token."""

    code = "context_length_exceeded"


class AuthenticationError(ProxyError):
    """Missing or wrong API key for the session (HTTP 401)."""

    status = 401
    error_type = "authentication_error"
    anthropic_type = "authentication_error"
    code = "invalid_api_key"


class NotFoundError(ProxyError):
    """Unknown route (HTTP 404)."""

    status = 404
    error_type = "not_found_error"
    anthropic_type = "not_found_error"
    code = "not_found"


class SessionNotFoundError(NotFoundError):
    """No session with this id (HTTP 404)."""

    code = "session_not_found"


class SessionClosedError(ProxyError):
    """The session was closed by the admin API (HTTP 410)."""

    status = 410
    error_type = "invalid_request_error"
    anthropic_type = "invalid_request_error"
    code = "session_closed"


class PayloadTooLargeError(ProxyError):
    """The request body exceeds the configured limit (HTTP 413)."""

    status = 413
    error_type = "invalid_request_error"
    anthropic_type = "request_too_large"
    code = "request_too_large"


class BackendUnavailableError(ProxyError):
    """The inference backend is down or failed this generation (HTTP 503)."""

    status = 503
    error_type = "server_error"
    anthropic_type = "overloaded_error"
    code = "backend_unavailable"


class CaptureError(ProxyError):
    """A capture file cannot be read (a corrupt line that is not the torn last line)."""


class ProxyAdminError(ProxyError):
    """An admin API call failed (raised by :class:`clawrl.proxy.AdminClient`)."""

    def __init__(self, message: str, *, status: int, code: str | None = None):
        super().__init__(message, code=code)
        self.status = status


def openai_error_body(err: ProxyError) -> dict[str, Any]:
    """The OpenAI error object: ``{"error": {"message", "type", "param", "code"}}``."""
    return {
        "error": {
            "message": err.message,
            "type": err.error_type,
            "param": err.param,
            "code": err.code,
        }
    }


def anthropic_error_body(err: ProxyError) -> dict[str, Any]:
    """The Anthropic error object: ``{"type": "error", "error": {"type", "message"}}``."""
    return {"type": "error", "error": {"type": err.anthropic_type, "message": err.message}}
