"""The boundary checks themselves (``memoryd.validation``), without a store or a broker:
the client and the store both call these, so each rule is tested once here."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest

from memoryd import validation as check
from memoryd.errors import ValidationError
from memoryd.schedules.names import JOB_NAMES
from memoryd.types import Entity, StoreItem


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
