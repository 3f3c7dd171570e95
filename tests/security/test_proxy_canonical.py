"""Property/unit tests of the tool-call argument canonicalisation used to match echoes
(JS ``JSON.stringify`` numbers; ``""`` as ``{}``)."""

from __future__ import annotations

import json
from typing import Any

from clawrl.proxy.splice import canonical_key, js_number
from clawrl.proxy.validation import tool_call_arguments
from hypothesis import given
from hypothesis import strategies as st

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda kids: (
        st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=4), kids, max_size=3)
    ),
    max_leaves=8,
)


def _js_stringify(v: Any) -> str:
    """What a JS harness sends back: numbers as doubles, integral ones without a fraction."""

    def conv(x: Any) -> Any:
        if isinstance(x, bool) or x is None or isinstance(x, str):
            return x
        if isinstance(x, int | float):
            f = float(x)
            return int(f) if f.is_integer() and abs(f) < 1e21 else f
        if isinstance(x, list):
            return [conv(y) for y in x]
        return {k: conv(y) for k, y in x.items()}

    return json.dumps(conv(v), separators=(",", ":"))


def test_js_number_examples() -> None:
    assert js_number(30.0) == 30 and isinstance(js_number(30.0), int)
    assert js_number(1e3) == 1000 and isinstance(js_number(1e3), int)
    assert js_number(-0.0) == 0
    assert js_number(0.5) == 0.5
    assert isinstance(js_number(1e21), float)
    assert js_number(10**400) == 10**400  # beyond a double: kept


@given(st.dictionaries(st.text(max_size=5), json_values, max_size=4))
def test_a_js_echo_has_the_generated_key(args: dict[str, Any]) -> None:
    generated = canonical_key(None, "", [("f", args)])
    echoed = canonical_key(None, "", [("f", _js_stringify(args))])
    assert generated == echoed


def test_empty_arguments_are_an_empty_object() -> None:
    key = canonical_key(None, "", [("f", {})])
    for echo in ("", "  ", None, "{}", "{ }"):
        assert canonical_key(None, "", [("f", echo)]) == key
        assert tool_call_arguments(echo, "a") == {}


def test_different_numbers_stay_different() -> None:
    a = canonical_key(None, "", [("f", {"x": 30.5})])
    b = canonical_key(None, "", [("f", '{"x": 30}')])
    assert a != b
