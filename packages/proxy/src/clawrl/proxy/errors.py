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
    "TooManyRequestsError",
    "UnsupportedParameterError",
    "anthropic_error_body",
    "openai_error_body",
]


class ProxyError(Exception):
    """Base of every error raised by clawrl-proxy.

    A subclass states its mapping in its class statement, e.g.
    ``class NotFoundError(ProxyError, status=404, error_type="not_found_error",
    code="not_found")``; what it leaves out it inherits, and ``anthropic_type`` follows
    ``error_type`` unless given.

    Attributes:
        status: HTTP status code sent to the client.
        error_type: the error ``type`` of the OpenAI error object.
        anthropic_type: the error ``type`` of the Anthropic error object.
        code: a short machine-readable code (OpenAI's ``code`` field).
        param: the request field at fault, when known.
    """

    status: int = 500
    error_type: str = "api_error"
    anthropic_type: str = "api_error"
    code: str = "internal_error"

    def __init_subclass__(
        cls,
        *,
        status: int | None = None,
        error_type: str | None = None,
        anthropic_type: str | None = None,
        code: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init_subclass__(**kwargs)
        if status is not None:
            cls.status = status
        if error_type is not None:
            cls.error_type = cls.anthropic_type = error_type
        if anthropic_type is not None:
            cls.anthropic_type = anthropic_type
        if code is not None:
            cls.code = code

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code


class ProxyRequestError(
    ProxyError, status=400, error_type="invalid_request_error", code="invalid_request"
):
    """The request is malformed or asks for something the proxy cannot do (HTTP 400)."""


class UnsupportedParameterError(ProxyRequestError, code="unsupported_parameter"):
    """A well-formed parameter whose value the proxy does not support (e.g. ``n`` > 1)."""


class ContextLengthExceededError(ProxyRequestError, code="context_length_exceeded"):
    """The rendered prompt leaves no room for a single completion token."""


class AuthenticationError(
    ProxyError, status=401, error_type="authentication_error", code="invalid_api_key"
):
    """Missing or wrong API key for the session (HTTP 401)."""


class NotFoundError(ProxyError, status=404, error_type="not_found_error", code="not_found"):
    """Unknown route (HTTP 404)."""


class SessionNotFoundError(NotFoundError, code="session_not_found"):
    """No session with this id (HTTP 404)."""


class SessionClosedError(
    ProxyError, status=410, error_type="invalid_request_error", code="session_closed"
):
    """The session was closed by the admin API (HTTP 410)."""


class PayloadTooLargeError(
    ProxyError,
    status=413,
    error_type="invalid_request_error",
    anthropic_type="request_too_large",
    code="request_too_large",
):
    """The request body exceeds the configured limit (HTTP 413)."""


class TooManyRequestsError(
    ProxyError, status=429, error_type="rate_limit_error", code="rate_limit_exceeded"
):
    """A session has more calls in flight than the proxy allows (HTTP 429)."""


class BackendUnavailableError(
    ProxyError,
    status=503,
    error_type="server_error",
    anthropic_type="overloaded_error",
    code="backend_unavailable",
):
    """The inference backend is down or failed this generation (HTTP 503)."""


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
