"""Hypothesis strategies shared by the proxy's fuzz tests (``from .strategies import ...``)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

json_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
)
# any JSON value: scalars, small lists and objects (what a fuzzed body field may hold)
json_value = st.recursive(
    json_scalar,
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4)
    ),
    max_leaves=6,
)


def request_bodies(
    key: str, entries: st.SearchStrategy[Any], **optional: st.SearchStrategy[Any]
) -> st.SearchStrategy[Any]:
    """Fuzzed request bodies: any JSON value, or an object whose ``key`` (the messages or
    input) is JSON or up to 4 ``entries``, with optional "model", "stream" and ``optional``
    fields."""
    return st.one_of(
        json_value,
        st.fixed_dictionaries(
            {key: st.one_of(json_value, st.lists(entries, max_size=4))},
            optional={
                "model": json_value,
                "stream": st.one_of(st.booleans(), json_value),
                **optional,
            },
        ),
    )
