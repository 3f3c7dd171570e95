"""Hypothesis strategies shared by the proxy's fuzz tests (``from .strategies import ...``)."""

from __future__ import annotations

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
