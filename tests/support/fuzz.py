"""What the fuzz tests throw at memoryd: junk values of every JSON-ish shape (and a few
that are not JSON at all), and the tables a refused call must leave untouched."""

from __future__ import annotations

import uuid

from hypothesis import strategies as st

SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.binary(max_size=8),
    st.text(max_size=12), st.just(""), st.just("\x00"), st.just("a\x00b"),
    st.just("x" * 600_000), st.just(" " * 300), st.just(uuid.uuid4()))
JUNK = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6)
# JSON cannot carry bytes or UUID objects: what a hand-crafted message can hold.
JSON_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=12), st.just(""),
    st.just("\x00"), st.just("a\x00b"), st.just("x" * 600_000), st.just(" " * 300))
JSON_JUNK = st.recursive(JSON_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6)
TABLES = ("memories", "sessions", "kg_entities", "kg_relations", "memory_links",
          "evicted_memories")
