"""The boundary checks themselves (``memoryd.validation``), without a store or a broker:
the client and the store both call these, so each rule is tested once here."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from memoryd import validation as check
from memoryd.errors import UnsupportedMediaType, ValidationError
from memoryd.schedules.names import JOB_NAMES
from memoryd.types import Entity, RecallRequest, StoreItem


def _field(call: object) -> str:
    with pytest.raises(ValidationError) as caught:
        call()  # type: ignore[operator]
    return caught.value.field


@pytest.mark.parametrize("value", ["", "   ", None, 3, "a\x00b", "a\nb", "x" * 256, "\ud800"])
def test_a_bad_agent_id_is_rejected_naming_agent_id(value: object) -> None:
    assert _field(lambda: check.agent_id(value)) == "agent_id"


def test_an_agent_id_at_the_length_limit_is_accepted() -> None:
    assert check.agent_id("a" * check.MAX_AGENT_ID) == "a" * check.MAX_AGENT_ID


@pytest.mark.parametrize("value", ["", " ", None, 1, "nul\x00", "lone \ud800", "é" * 51])
def test_bad_content_is_rejected_naming_content(value: object) -> None:
    assert _field(lambda: check.content(value, max_bytes=100)) == "content"


def test_content_is_measured_in_utf8_bytes() -> None:
    assert check.content("é" * 50, max_bytes=100) == "é" * 50


@pytest.mark.parametrize(("value", "ok"), [(1, True), (1000, True), (0, False), (1001, False),
                                           (True, False), (2.0, False), ("3", False)])
def test_limit_takes_integers_from_one_to_its_bound(value: object, ok: bool) -> None:
    if ok:
        assert check.limit(value) == value
    else:
        assert _field(lambda: check.limit(value)) == "limit"


@pytest.mark.parametrize("value", ["quick", "", None, 1])
def test_an_unknown_recall_mode_is_rejected(value: object) -> None:
    assert _field(lambda: check.mode(value)) == "mode"


def test_both_recall_modes_are_accepted() -> None:
    assert [check.mode(m) for m in ("fast", "deep")] == ["fast", "deep"]


@pytest.mark.parametrize("value", [-1, check.MAX_KG_DEPTH + 1, True, 1.5, "2", None])
def test_a_graph_depth_outside_its_range_is_rejected(value: object) -> None:
    assert _field(lambda: check.depth(value)) == "depth"


def test_a_memory_id_is_parsed_from_text_and_kept_as_a_uuid() -> None:
    value = uuid.uuid4()
    assert check.memory_id(str(value)) == value
    assert check.memory_id(value) is value
    assert _field(lambda: check.memory_id("not-a-uuid")) == "memory_id"


def test_job_names_are_the_scheduled_jobs_only() -> None:
    assert [check.job_name(name) for name in JOB_NAMES] == list(JOB_NAMES)
    assert _field(lambda: check.job_name("vacuum")) == "job"


def test_tags_are_deduplicated_in_order_and_a_string_is_not_a_list() -> None:
    assert check.tags(["b", "a", "b"]) == ("b", "a")
    assert _field(lambda: check.tags("a")) == "tags"
    assert _field(lambda: check.tags(["ok", ""])) == "tags"


def test_metadata_must_be_a_json_object_without_nul() -> None:
    assert check.metadata({"n": 1}) == {"n": 1}
    for bad in (["list"], {"x": float("nan")}, {"x": "nul\x00"}, {"x": {1, 2}}):
        assert _field(lambda bad=bad: check.metadata(bad)) == "metadata"


def test_timestamps_must_be_timezone_aware() -> None:
    aware = datetime(2026, 1, 2, tzinfo=UTC)
    assert check.timestamp("expires_at", aware.isoformat()) == aware
    assert _field(lambda: check.timestamp("expires_at", "2026-01-02T00:00:00")) == "expires_at"
    assert _field(lambda: check.timestamp("created_at", "yesterday")) == "created_at"


def test_a_store_item_rejects_unknown_fields_by_name() -> None:
    assert _field(lambda: check.store_item({"content": "x", "colour": "red"}, 100)) == "colour"
    item = check.store_item({"content": "x", "tags": ["a"], "importance": 0.5}, 100)
    assert item == StoreItem(content="x", tags=("a",), importance=0.5)


def test_errors_in_a_batch_name_the_item() -> None:
    items = [{"content": "ok"}, {"content": "ok", "importance": 2}]
    assert _field(lambda: check.store_items(items, 100)) == "items[1].importance"
    assert _field(lambda: check.store_items([], 100)) == "items"
    assert _field(lambda: check.store_items("text", 100)) == "items"


def test_an_entity_must_be_an_object_with_an_id() -> None:
    parsed = check.entity({"id": "alice", "relations": [{"target": "bob", "type": "knows"}]})
    assert parsed.id == "alice" and parsed.type == "entity"
    assert check.entity(Entity(id="bob")).id == "bob"
    for bad, field in ((None, "entity"), ("alice", "entity"), ({"type": "x"}, "entity.id"),
                       ({"id": "a", "relations": [{"target": "b"}]}, "entity.relations[0]")):
        assert _field(lambda bad=bad: check.entity(bad)) == field


def test_a_json_object_must_survive_json() -> None:
    assert check.json_object("params", {"days": 3}) == {"days": 3}
    assert _field(lambda: check.json_object("params", ["x"])) == "params"
    assert _field(lambda: check.json_object("params", {"x": object()})) == "params"


# --- limits where the database would break ----------------------------------------------

FOUR_BYTES = "\U0001F600"  # one character, four bytes of UTF-8


@pytest.mark.parametrize(("call", "field"), [
    (lambda v: check.store_item({"content": "x", "key": v}, 100), "key"),
    (lambda v: check.store_item({"content": "x", "session_id": v}, 100), "session_id"),
    (lambda v: check.store_item({"content": "x", "source": v}, 100), "source"),
    (lambda v: check.entity({"id": v}), "entity.id"),
    (lambda v: check.entity({"id": "a", "relations": [{"target": v, "type": "t"}]}),
     "entity.relations[0].target"),
    (lambda v: check.entity_ref("start_id", v), "start_id"),
])
def test_texts_of_long_four_byte_characters_are_refused_by_their_utf8_bytes(
        call: object, field: str) -> None:
    # 512 characters fit every column; 2048 bytes would break the index on it.
    assert _field(lambda: call(FOUR_BYTES * check.MAX_KEY)) == field  # type: ignore[operator]


def test_an_agent_id_of_four_byte_characters_is_limited_in_bytes() -> None:
    fits = FOUR_BYTES * (check.MAX_AGENT_ID_BYTES // 4)
    assert check.agent_id(fits) == fits
    assert _field(lambda: check.agent_id(fits + FOUR_BYTES)) == "agent_id"


def test_a_relation_type_of_four_byte_characters_is_limited_in_bytes() -> None:
    relation = {"target": "b", "type": FOUR_BYTES * 200}
    assert _field(lambda: check.entity({"id": "a", "relations": [relation]})) == \
        "entity.relations[0].type"


def test_the_longest_texts_of_a_relation_fit_a_btree_entry_together() -> None:
    # kg_relations' primary key holds agent, source, target and type in one entry.
    widest = (check.MAX_AGENT_ID_BYTES + 2 * check.MAX_ENTITY_ID_BYTES
              + check.MAX_RELATION_TYPE_BYTES)
    assert widest + 64 < 2700
    assert check.MAX_AGENT_ID_BYTES + check.MAX_TEXT_BYTES + 64 < 2700


@pytest.mark.parametrize(("call", "field"), [
    (check.metadata, "metadata"),
    (lambda v: check.json_object("params", v), "params"),
    (lambda v: check.entity({"id": "a", "attributes": v}), "entity.attributes"),
    (lambda v: check.store_item({"content": "x", "metadata": v}, 100), "metadata"),
])
def test_json_nested_too_deep_is_refused_by_name(call: object, field: str) -> None:
    deep: dict[str, object] = {}
    for _ in range(5000):  # deeper than Python's recursion limit
        deep = {"a": deep}
    assert _field(lambda: call(deep)) == field  # type: ignore[operator]


def test_json_at_the_depth_limit_is_accepted_and_one_deeper_refused() -> None:
    value: object = 1
    for _ in range(check.MAX_JSON_DEPTH - 1):  # in an object: the limit exactly
        value = [value]
    assert check.json_object("params", {"v": value}) == {"v": value}
    assert _field(lambda: check.json_object("params", {"v": [value]})) == "params"


def test_a_raw_body_nested_too_deep_is_refused_before_parsing() -> None:
    with pytest.raises(ValidationError) as caught:
        check.json_text_depth("body", "[" * 1_000_000)
    assert caught.value.field == "body"
    check.json_text_depth("body", '{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\\""}')
    check.json_text_depth("body", "[" * check.MAX_JSON_DEPTH + "]" * check.MAX_JSON_DEPTH)


JSON = "application/json"
# U+2200 is 00 22 in UTF-16-LE: a '"' byte that hid the brackets after it from a count
# of the raw bytes, so the parser recursed 100 000 deep (RecursionError, a 500).
HIDDEN_BRACKETS = ('["\u2200", ' + "[" * 100_000 + "]" * 100_000 + ', "x"]').encode("utf-16")


@pytest.mark.parametrize("raw", [
    HIDDEN_BRACKETS, '{"content": "hi"}'.encode("utf-16-le"), '{"content": "hi"}'.encode("utf-32"),
    '{"content": "caf\u00e9"}'.encode("latin-1"), b'{"content": "\xed\xa0\x80"}'])
def test_a_body_that_is_not_utf8_is_refused_as_unsupported(raw: bytes) -> None:
    with pytest.raises(UnsupportedMediaType) as caught:
        check.json_body(raw, JSON)
    assert caught.value.field == "body"


@pytest.mark.parametrize("content_type", ["application/json; charset=utf-16",
                                          'application/json; charset="latin-1"'])
def test_a_body_said_to_be_in_another_charset_is_refused(content_type: str) -> None:
    with pytest.raises(UnsupportedMediaType) as caught:
        check.json_body(b"{}", content_type)
    assert caught.value.field == "content-type"


@pytest.mark.parametrize("raw", [
    b'{"a": NaN}', b'{"a": -Infinity}', b'{"a": 1e999}', b'{"a": 1, "a": 2}',
    b'{"a": {"b": 1, "b": 1}}', b'{"a": ' + b"9" * 5000 + b"}", b'{"a": 1} x', b"{",
    b"[" * 40 + b"]" * 40, b'\xef\xbb\xbf\xef\xbb\xbf{}'])
def test_a_body_json_cannot_hold_is_refused_naming_the_body(raw: bytes) -> None:
    assert _field(lambda: check.json_body(raw, JSON)) == "body"


def test_a_utf8_body_is_read_with_or_without_a_byte_order_mark() -> None:
    text = '{"content": "caf\u00e9", "n": [1.5, 2]}'
    expected = {"content": "caf\u00e9", "n": [1.5, 2]}
    assert check.json_body(text.encode(), JSON) == expected
    assert check.json_body(b"\xef\xbb\xbf" + text.encode(), "application/json; charset=UTF-8") \
        == expected


CANARY = "canary-7f3e"


@pytest.mark.parametrize("call", [
    lambda: check.category(CANARY), lambda: check.role(CANARY), lambda: check.mode(CANARY),
    lambda: check.limit(CANARY), lambda: check.offset(CANARY),
    lambda: check.unit_interval("importance", CANARY), lambda: check.timestamp("since", CANARY),
    lambda: check.memory_id(CANARY), lambda: check.restore_target(CANARY),
    lambda: check.job_name(CANARY), lambda: check.boolean("dry_run", CANARY),
    lambda: check.list_order(CANARY), lambda: check.json_content_type(CANARY),
    lambda: check.metadata({"a": {1, 2}}), lambda: check.metadata({"a": float("nan")}),
    lambda: check.metadata_filter({CANARY * 200: 1}),
    lambda: check.json_object("params", {"a": CANARY + "\ud800"}),
    lambda: check.entity({"id": "x", "attributes": {"a": float("inf"), "b": CANARY}}),
])
def test_a_refusal_never_quotes_the_value(call: object) -> None:
    with pytest.raises(ValidationError) as caught:
        call()  # type: ignore[operator]
    assert CANARY not in str(caught.value) and "ud800" not in str(caught.value)


@pytest.mark.parametrize(("key", "field"), [
    ("project", "metadata.project"), ("\ud800", "metadata"), ("a\nb", "metadata"),
    ("k" * (check.MAX_FIELD_NAME + 1), "metadata")])
def test_a_key_is_named_as_a_field_only_when_it_can_be_shown(key: str, field: str) -> None:
    assert _field(lambda: check.metadata_filter({key: [1]})) == field


@pytest.mark.parametrize("key", ["\ud800", "x" * 100, "a\x00"])
def test_an_unknown_field_that_cannot_be_shown_is_named_body(key: str) -> None:
    assert _field(lambda: check.store_item({"content": "x", key: 1}, 100)) == "body"
    assert _field(lambda: check.request(RecallRequest, {"query": "x", key: 1})) == "body"


def test_a_pydantic_refusal_names_the_field_without_the_input() -> None:
    with pytest.raises(ValidationError) as caught:
        check.request(RecallRequest, {"query": "x", "tags": ["a", [CANARY]]})
    assert caught.value.field == "tags[1]" and CANARY not in str(caught.value)


@pytest.mark.parametrize("value", [-1, 2**63, 99999999999999999999, True, "3", 1.0])
def test_an_offset_outside_bigint_is_refused(value: object) -> None:
    assert _field(lambda: check.offset(value)) == "offset"


def test_offsets_up_to_the_bigint_maximum_are_accepted() -> None:
    assert check.offset(2**63 - 1) == 2**63 - 1 and check.offset(0) == 0


@pytest.mark.parametrize("value", ["0001-01-01T00:00:00+14:00",
                                   "9999-12-31T23:59:59.999999+00:00",
                                   "9999-12-31T00:00:00-12:00", "0001-01-01T00:00:00Z"])
def test_timestamps_at_the_ends_of_the_range_are_refused_by_name(value: str) -> None:
    assert _field(lambda: check.timestamp("until", value)) == "until"


def test_timestamps_are_normalised_to_utc() -> None:
    checked = check.timestamp("since", "2026-11-18T09:00:00+09:00")
    assert checked == datetime(2026, 11, 18, 0, tzinfo=UTC)
    assert checked is not None and checked.utcoffset() is not None
    assert checked.tzinfo is UTC


@pytest.mark.parametrize("value", ["\u00b2", "\u0663", "\uff11", "1\u00b2", "0", "-1", "9" * 5000,
                                   str(2**63), "1 "])
def test_an_eviction_number_is_ascii_digits_within_bigint(value: str) -> None:
    assert _field(lambda: check.restore_target(value)) == "eviction_id"


def test_an_eviction_number_or_a_memory_id_is_a_restore_target() -> None:
    memory = uuid.uuid4()
    assert check.restore_target("42") == 42 and check.restore_target(42) == 42
    assert check.restore_target(str(memory)) == str(memory)
    assert check.restore_target(memory) == str(memory)


def test_a_uuid_in_other_digits_is_refused() -> None:
    assert _field(lambda: check.memory_id("\u0660" * 32)) == "memory_id"


@pytest.mark.parametrize("value", ["text/plain", "application/x-www-form-urlencoded",
                                   None, "", "multipart/form-data; boundary=x",
                                   "application/jsonx"])
def test_a_body_that_does_not_say_json_is_refused(value: str | None) -> None:
    with pytest.raises(UnsupportedMediaType) as caught:
        check.json_content_type(value)
    assert caught.value.field == "content-type"


@pytest.mark.parametrize("value", ["application/json", "Application/JSON; charset=utf-8",
                                   "application/merge-patch+json"])
def test_json_content_types_are_accepted(value: str) -> None:
    check.json_content_type(value)
