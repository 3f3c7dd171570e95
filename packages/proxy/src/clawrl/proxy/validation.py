"""Small typed readers of JSON request fields; every failure is a ProxyRequestError naming
the field."""

from __future__ import annotations

import json
import math
from typing import Any

from clawrl.proxy.errors import ProxyRequestError

__all__ = [
    "opt_bool",
    "opt_int",
    "opt_number",
    "opt_str",
    "req_list",
    "req_obj",
    "req_str",
]


def _type_name(v: Any) -> str:
    return "null" if v is None else type(v).__name__


def req_obj(v: Any, param: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise ProxyRequestError(f"{param} must be an object, not {_type_name(v)}", param=param)
    return v


def req_list(v: Any, param: str) -> list[Any]:
    if not isinstance(v, list):
        raise ProxyRequestError(f"{param} must be an array, not {_type_name(v)}", param=param)
    return v


def req_str(v: Any, param: str) -> str:
    if not isinstance(v, str):
        raise ProxyRequestError(f"{param} must be a string, not {_type_name(v)}", param=param)
    return v


def opt_str(v: Any, param: str) -> str | None:
    return None if v is None else req_str(v, param)


def opt_bool(v: Any, param: str) -> bool | None:
    if v is None:
        return None
    if not isinstance(v, bool):
        raise ProxyRequestError(f"{param} must be a boolean, not {_type_name(v)}", param=param)
    return v


def opt_int(v: Any, param: str, *, minimum: int | None = None) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
            v = int(v)
        else:
            raise ProxyRequestError(f"{param} must be an integer, not {_type_name(v)}", param=param)
    if minimum is not None and v < minimum:
        raise ProxyRequestError(f"{param} must be >= {minimum}, got {v}", param=param)
    return int(v)


def opt_number(
    v: Any, param: str, *, minimum: float | None = None, maximum: float | None = None
) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ProxyRequestError(f"{param} must be a number, not {_type_name(v)}", param=param)
    f = float(v)
    if not math.isfinite(f):
        raise ProxyRequestError(f"{param} must be finite", param=param)
    if minimum is not None and f < minimum:
        raise ProxyRequestError(f"{param} must be >= {minimum}, got {f}", param=param)
    if maximum is not None and f > maximum:
        raise ProxyRequestError(f"{param} must be <= {maximum}, got {f}", param=param)
    return f


def tool_call_arguments(v: Any, param: str) -> Any:
    """Echoed tool-call arguments for the chat template: the dict when ``v`` is (or is a JSON
    string holding) an object, ``{}`` for None, else the string as sent (rendered verbatim).

    Raises:
        ProxyRequestError: ``v`` is neither a dict, None nor a string.
    """
    if isinstance(v, dict):
        return v
    if v is None:
        return {}
    s = req_str(v, param)
    try:
        parsed = json.loads(s)
    except (ValueError, RecursionError):
        return s
    return parsed if isinstance(parsed, dict) else s
