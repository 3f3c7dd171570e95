"""Small typed readers of JSON request fields; every failure is a ProxyRequestError naming
the field."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import orjson
from clawrl.proxy.errors import ProxyRequestError

#: Deepest nesting of arrays/objects accepted in a request body (a scalar has depth 0,
#: ``[1]`` depth 1). Deeper bodies get a typed 400 at parse time: rendering them (the chat
#: template's ``tojson``) or recording them (orjson, limit 254) would fail later.
MAX_JSON_DEPTH = 128

# orjson.dumps serialises nesting up to 254 levels and raises beyond (checked by the tests):
# wrapping a value in 254 - MAX_JSON_DEPTH lists makes dumps fail iff its depth exceeds the
# limit, at C speed and without recursing in Python.
_ORJSON_DUMPS_DEPTH = 254

__all__ = [
    "MAX_JSON_DEPTH",
    "check_json_depth",
    "json_depth_exceeds",
    "opt_bool",
    "opt_int",
    "opt_kind",
    "opt_number",
    "opt_seed",
    "opt_str",
    "opt_top_k",
    "req_list",
    "req_obj",
    "req_str",
    "text_of_parts",
]


def json_depth_exceeds(v: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``v`` (parsed JSON) nests arrays/objects deeper than ``limit`` levels.

    Raises:
        ValueError: ``limit`` is outside ``[0, 254]``.
    """
    if not 0 <= limit <= _ORJSON_DUMPS_DEPTH:
        raise ValueError(f"limit must be in [0, {_ORJSON_DUMPS_DEPTH}]")
    wrapped = v
    for _ in range(_ORJSON_DUMPS_DEPTH - limit):
        wrapped = [wrapped]
    try:
        orjson.dumps(wrapped)
    except orjson.JSONEncodeError as e:
        if "Recursion" in str(e):
            return True
        return _depth_slow(v, limit)
    except TypeError:
        return _depth_slow(v, limit)
    return False


def _depth_slow(v: Any, limit: int) -> bool:
    stack: list[tuple[Any, int]] = [(v, 0)]
    while stack:
        x, d = stack.pop()
        if isinstance(x, dict):
            x = list(x.values())
        if isinstance(x, list):
            if d + 1 > limit:
                return True
            stack.extend((c, d + 1) for c in x)
    return False


def check_json_depth(v: Any, param: str = "body", *, limit: int = MAX_JSON_DEPTH) -> None:
    """Reject JSON nested deeper than ``limit`` levels.

    Raises:
        ProxyRequestError: the value nests deeper than ``limit`` (code ``json_too_deep``).
    """
    if json_depth_exceeds(v, limit):
        raise ProxyRequestError(
            f"{param} nests arrays/objects deeper than {limit} levels",
            param=param,
            code="json_too_deep",
        )


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


def opt_kind(v: Any, param: str) -> str | None:
    """A discriminator field (``role``, ``type``): a string or absent.

    Raises:
        ProxyRequestError: ``v`` is present and not a string (a list or object there used to
            reach set lookups as an unhashable value).
    """
    return None if v is None else req_str(v, param)


def text_of_parts(
    v: Any,
    param: str,
    part_text: Callable[[dict[str, Any], str | None, str], str],
    *,
    sep: str = "",
    bare_strings: bool = False,
) -> str:
    """The text of a content field: ``None`` is ``""``, a string is itself, a list of parts
    is their texts joined by ``sep``. Each part is an object (or, with ``bare_strings``, a
    string taken as is) whose text is ``part_text(part, its "type", its param)``; that
    raises on a part the API refuses.

    Raises:
        ProxyRequestError: ``v`` is not a list, a part not an object, a ``type`` not a
            string, or as ``part_text``.
    """
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    out: list[str] = []
    for i, part in enumerate(req_list(v, param)):
        p = f"{param}[{i}]"
        if bare_strings and isinstance(part, str):
            out.append(part)
            continue
        part = req_obj(part, p)
        out.append(part_text(part, opt_kind(part.get("type"), p + ".type"), p))
    return sep.join(out)


def opt_bool(v: Any, param: str) -> bool | None:
    if v is None:
        return None
    if not isinstance(v, bool):
        raise ProxyRequestError(f"{param} must be a boolean, not {_type_name(v)}", param=param)
    return v


def opt_int(
    v: Any, param: str, *, minimum: int | None = None, maximum: int | None = None
) -> int | None:
    """An optional integer (an integral float is accepted) within ``[minimum, maximum]``.

    Raises:
        ProxyRequestError: not an integer, or out of range.
    """
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
            v = int(v)
        else:
            raise ProxyRequestError(f"{param} must be an integer, not {_type_name(v)}", param=param)
    if minimum is not None and v < minimum:
        raise ProxyRequestError(f"{param} must be >= {minimum}, got {v}", param=param)
    if maximum is not None and v > maximum:
        raise ProxyRequestError(f"{param} must be <= {maximum}, got {v}", param=param)
    return int(v)


def opt_top_k(v: Any, param: str = "top_k") -> int | None:
    """``top_k``: -1 (off) or an integer in ``[1, 2**31 - 1]``; 0 and other negatives are
    rejected here rather than by the backend (which would answer 503).

    Raises:
        ProxyRequestError: another value.
    """
    k = opt_int(v, param, minimum=-1, maximum=2**31 - 1)
    if k is not None and k == 0:
        raise ProxyRequestError(f"{param} must be -1 (off) or >= 1, got 0", param=param)
    return k


def opt_seed(v: Any, param: str = "seed") -> int | None:
    """``seed``: an integer in ``[-(2**63), 2**63 - 1]``.

    Raises:
        ProxyRequestError: another value.
    """
    return opt_int(v, param, minimum=-(2**63), maximum=2**63 - 1)


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
    string holding) an object, ``{}`` for None or an empty (blank) string — how JS harnesses
    echo a call without arguments — else the string as sent (rendered verbatim).

    A string that parses to JSON nested deeper than :data:`MAX_JSON_DEPTH` levels is refused,
    as a body that deep is: the renderer, the chat template and the recorder would recurse
    through it.

    Raises:
        ProxyRequestError: ``v`` is neither a dict, None nor a string; or its JSON nests
            deeper than :data:`MAX_JSON_DEPTH` (code ``json_too_deep``).
    """
    if isinstance(v, dict):
        return v
    if v is None:
        return {}
    s = req_str(v, param)
    if not s.strip():
        return {}
    try:
        parsed = json.loads(s)
    except RecursionError:
        parsed = None
        too_deep = True
    except ValueError:
        return s
    else:
        too_deep = json_depth_exceeds(parsed)
    if too_deep:
        raise ProxyRequestError(
            f"{param} holds JSON nested deeper than {MAX_JSON_DEPTH} levels",
            param=param,
            code="json_too_deep",
        )
    return parsed if isinstance(parsed, dict) else s
