"""The adapters' mappings between framework objects and memoryd's, without services:
what each framework item becomes, and what comes back."""

from __future__ import annotations

import itertools
import json
import random
import uuid
from datetime import UTC, datetime

import pytest
from autogen_core import Image
from autogen_core.memory import MemoryContent, MemoryMimeType
from autogen_core.models import AssistantMessage, SystemMessage, UserMessage
from google.adk.events.event import Event
from google.genai import types

from memoryd.auth.scope import KeyScope
from memoryd.errors import ValidationError
from memoryd.integrations import adk, autogen, identity, openai_agents
from memoryd.types import Memory

NOW = datetime(2026, 5, 6, tzinfo=UTC)


def _memory(content: str, metadata: dict, role: str | None = None) -> Memory:
    return Memory(id=uuid.uuid4(), agent_id="a", content=content, role=role, category="context",
                  metadata=metadata, importance=0.5, confidence=1.0, created_at=NOW,
                  updated_at=NOW)


@pytest.mark.parametrize(("item", "role"), [
    ({"role": "user", "content": "hi"}, "user"),
    ({"type": "message", "role": "developer", "content": "Be brief."}, "system"),
    ({"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}, None),
    ({"type": "function_call_output", "call_id": "c", "output": "1"}, None)])
def test_only_messages_get_a_role_so_session_repair_never_merges_tool_calls(
        item: dict, role: str | None) -> None:
    assert openai_agents.store_row(0, item, "s", 10_000)["role"] == role


def test_an_item_comes_back_exactly_unless_maintenance_rewrote_its_text() -> None:
    item = {"z": 1, "role": "user", "content": [{"type": "input_text", "text": "Hola"}]}
    row = openai_agents.store_row(0, item, "s", 10_000)
    assert row["content"].startswith("Hola\n[")
    kept = openai_agents.as_item(_memory(row["content"], row["metadata"], "user"))
    assert json.dumps(kept) == json.dumps(item)
    merged = openai_agents.as_item(_memory("Hola\nadiós", row["metadata"], "user"))
    assert merged == {"role": "user", "content": "Hola\nadiós"}


def test_an_item_that_is_not_json_is_refused_by_its_index() -> None:
    with pytest.raises(ValidationError) as refused:
        openai_agents.store_row(3, {"role": "user", "content": {1, 2}}, "s", 10_000)
    assert refused.value.field == "items[3]"


@pytest.mark.parametrize("item", ["text", ["a", 1], 7, None])
def test_an_item_that_is_json_but_no_object_comes_back_as_the_same_value(item: object) -> None:
    # As SQLiteSession, which stores any JSON value.
    row = openai_agents.store_row(0, item, "s", 10_000)
    assert openai_agents.as_item(_memory(row["content"], row["metadata"], None)) == item


def test_an_event_without_text_stays_out_and_thoughts_are_left_out() -> None:
    thinking = Event(author="bot", content=types.Content(role="model", parts=[
        types.Part(text="(thinking it over)", thought=True), types.Part(text="Sure.")]))
    row = adk.event_row(thinking, "s1", {})
    assert row is not None and row["content"] == "Sure." and row["role"] == "assistant"
    assert row["key"] == f"adk-event:{thinking.id}"
    call = Event(author="bot", content=types.Content(role="model", parts=[
        types.Part(function_call=types.FunctionCall(name="f", args={}))]))
    assert adk.event_row(call, "s1", {}) is None


def test_an_adk_scope_names_its_empty_part() -> None:
    assert adk.agent_of("shop", "ana") == "shop/ana"
    with pytest.raises(ValidationError) as refused:
        adk.agent_of("shop", " ")
    assert refused.value.field == "user_id"


# Parts full of the separator, the escape character, its escapes and other separators.
PARTS = ["", "a", "/", "//", "%", "%%", "%2F", "%2f", "%25", "%252F", "%2", ":", "a:b",
         "a/b", "a%b", "\\", "/a/", " "]


def test_no_two_identities_share_an_agent_whatever_separators_their_parts_hold() -> None:
    tuples = [*itertools.product(PARTS, repeat=2), *itertools.product(PARTS[:8], repeat=3)]
    named = {identity.agent_id(*parts): parts for parts in tuples}
    assert len(named) == len(tuples)
    assert all(identity.parts_of(agent) == parts for agent, parts in named.items())
    assert adk.agent_of("app/other-user", "user") != adk.agent_of("app", "other-user/user")


def test_random_identities_map_to_agents_one_to_one_and_back() -> None:
    rng = random.Random(34)
    seen: dict[str, tuple[str, ...]] = {}
    for _ in range(20_000):
        parts = tuple("".join(rng.choice("a/%2F5:") for _ in range(rng.randint(0, 6)))
                      for _ in range(rng.randint(2, 3)))
        agent = identity.agent_id(*parts)
        assert seen.setdefault(agent, parts) == parts
        assert identity.parts_of(agent) == parts


def test_a_pair_without_a_slash_or_percent_keeps_the_name_older_memoryd_gave_it() -> None:
    assert adk.agent_of("shop", "ana") == "shop/ana"
    assert adk.agent_of("shop:eu", "ana@example.com") == "shop:eu/ana@example.com"
    assert adk.agent_of("50%", "a/b") == "50%25/a%2Fb"


def test_a_key_scoped_to_an_apps_prefix_covers_its_users_and_no_other_apps() -> None:
    def scope(prefix: str) -> KeyScope:
        return KeyScope(id=uuid.uuid4(), name="k", agents=(), agent_prefixes=(prefix,),
                        permissions=("read",))

    shop = scope(adk.app_prefix("shop"))
    assert shop.agent_prefixes == ("shop/",)
    assert all(shop.covers(adk.agent_of("shop", user))
               for user in ["ana", "../other/x", "%2F..", "/", "x/y"])
    assert not any(shop.covers(adk.agent_of(app, user)) for app, user in [
        ("shop/x", "y"), ("shop%2Fx", "y"), ("shopping", "y"), ("sho", "p/x"),
        ("shop%", "x"), ("other", "shop/x")])
    odd = scope(adk.app_prefix("a/b%"))
    assert odd.covers(adk.agent_of("a/b%", "u"))
    assert not odd.covers(adk.agent_of("a", "b%/u")) and not odd.covers(
        adk.agent_of("a/b", "%u"))


def test_an_identity_too_long_once_escaped_is_refused_naming_the_agent_id() -> None:
    assert adk.agent_of("a" * 100, "b" * 100)
    with pytest.raises(ValidationError) as refused:
        adk.agent_of("/" * 100, "b")
    assert refused.value.field == "agent_id" and "/" not in refused.value.message


@pytest.mark.parametrize(("name", "scoped", "unscoped", "status", "target"), [
    ("shop/ana", 0, 5, None, None),  # the same name before and now
    ("a%25b/c", 4, 0, None, None),  # named now: only the newer adapter wrote to it
    ("50%/ana", 0, 2, "move", "50%25/ana"),
    ("/a/b", 0, 1, "move", "%2Fa/b"),  # a blank app was refused: one pair makes it
    ("a/b/c", 0, 1, "ambiguous", None),
    ("a//c", 0, 1, "ambiguous", None),
    ("a%b/c", 1, 1, "mixed", None),
    ("x%y", 0, 1, "unmatched", None),
    ("a/" + "/" * 200, 0, 1, "ambiguous", None),
    ("%" * 100 + "/u", 0, 1, "too long", None)])
def test_an_older_adk_name_moves_only_when_one_pair_makes_it(
        name: str, scoped: int, unscoped: int, status: str | None, target: str | None
) -> None:
    plan = identity.legacy_adk_agent(name, scoped=scoped, unscoped=unscoped)
    assert (plan and plan.status) == status
    assert (plan and plan.target) == target


def test_the_last_user_messages_text_is_what_autogen_recalls_for() -> None:
    messages = [UserMessage(content="old question", source="u"),
                UserMessage(content=["new", Image.from_base64(_PIXEL), "question"], source="u"),
                AssistantMessage(content="an answer", source="a"),
                SystemMessage(content="rules")]
    assert autogen.last_user_text(messages) == "new\nquestion"
    assert autogen.last_user_text(messages[2:]) is None


def test_autogen_content_is_stored_as_text_or_json_and_anything_else_is_refused() -> None:
    assert autogen.as_text(MemoryContent(content={"a": 1}, mime_type="application/json")) == (
        '{"a": 1}', "application/json")
    markdown = MemoryContent(content="# Notes", mime_type=MemoryMimeType.MARKDOWN)
    assert autogen.as_text(markdown) == ("# Notes", "text/markdown")
    with pytest.raises(ValidationError) as refused:
        autogen.as_text(MemoryContent(content=b"\x00", mime_type=MemoryMimeType.BINARY))
    assert refused.value.field == "content"


_PIXEL = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5C"
          "YII=")
