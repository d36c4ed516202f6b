"""Boundary validation shared by the client (before enqueuing) and the store
(before writing). Every failure raises ``ValidationError`` naming the field, never
quoting the value: messages reach error bodies, task events and logs, and a value is
the caller's data (it may also be text no response can encode, a lone surrogate).
No SQLAlchemy here: the thin client imports this module."""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from uuid import UUID

from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from memoryd import clock
from memoryd.errors import ContentTooLarge, UnsupportedMediaType, ValidationError
from memoryd.types import CATEGORIES, RECALL_MODES, ROLES, Entity, Relation, StoreItem

MAX_AGENT_ID = 255
MAX_KEY = 512
MAX_TAGS = 64
MAX_TAG = 128
MAX_QUERY_CHARS = 8192
MAX_KG_DEPTH = 6
MAX_RELATIONS = 1000
MAX_RELATION_TYPE = 240

# UTF-8 byte limits. A btree index entry must stay under about 2700 bytes, and the
# character limits above (the column sizes) allow four bytes a character, so each
# indexed text is also capped in bytes: every index's columns together stay near 2300.
MAX_AGENT_ID_BYTES = 512  # in every index
MAX_TEXT_BYTES = 1024  # key (uq_memories_agent_key), session id (sessions' key), source, tags
MAX_ENTITY_ID_BYTES = 640  # kg_relations' key: agent, source, target and type together
MAX_RELATION_TYPE_BYTES = 512
# How deeply JSON values (metadata, attributes, job parameters, request bodies) nest.
MAX_JSON_DEPTH = 32
# A key an error may name as its field (``metadata.<key>``); a longer one is not shown.
MAX_FIELD_NAME = 64
# PostgreSQL's integer types: offsets and eviction numbers are bigint, limits int.
MAX_BIGINT = 2**63 - 1
MAX_INT = 2**31 - 1
# Timestamps, in UTC: a day inside years 1 to 9999, so the value stays representable
# whatever timezone (at most a day away) reads or writes it.
MIN_TIMESTAMP = datetime(1, 1, 2, tzinfo=UTC)
MAX_TIMESTAMP = datetime(9999, 12, 30, 23, 59, 59, 999999, tzinfo=UTC)
RequestT = TypeVar("RequestT", bound=BaseModel)


def _no_control_chars(field: str, value: str) -> None:
    for ch in value:
        if unicodedata.category(ch) == "Cc":
            raise ValidationError(field, f"contains control character {ch!r}")
    _no_surrogates(field, value)


def _no_surrogates(field: str, value: str) -> None:
    """PostgreSQL (and the tokenizer) only take valid UTF-8: no lone surrogates, which
    is also how bytes that were not UTF-8 arrive (a path, a command line argument)."""
    if not _encodes(value):
        raise ValidationError(field, "is not valid UTF-8 (it holds a lone surrogate or "
                                     "bytes that are not UTF-8)")


def _no_more_bytes(field: str, value: str, max_bytes: int) -> None:
    size = len(value.encode("utf-8"))
    if size > max_bytes:
        raise ValidationError(field, f"is {size} bytes in UTF-8, at most {max_bytes}")


def agent_id(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError("agent_id", "must be a non-empty string")
    if len(value) > MAX_AGENT_ID:
        raise ValidationError("agent_id", f"is {len(value)} characters, at most {MAX_AGENT_ID}")
    _no_control_chars("agent_id", value)
    _no_more_bytes("agent_id", value, MAX_AGENT_ID_BYTES)
    return value


def short_text(field: str, value: object, max_len: int = MAX_KEY,
               max_bytes: int = MAX_TEXT_BYTES) -> str | None:
    """An optional one-line text of at most ``max_len`` characters and ``max_bytes``
    bytes of UTF-8 (the limit an index on it needs)."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(field, "must be a non-empty string when given")
    if len(value) > max_len:
        raise ValidationError(field, f"is {len(value)} characters, at most {max_len}")
    _no_control_chars(field, value)
    _no_more_bytes(field, value, max_bytes)
    return value


def content(value: object, max_bytes: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError("content", "must be a non-empty string")
    if "\x00" in value:
        raise ValidationError("content", "contains a NUL byte")
    _no_surrogates("content", value)
    size = len(value.encode("utf-8"))
    if size > max_bytes:
        raise ContentTooLarge("content", f"is {size} bytes, at most {max_bytes}")
    return value


def query(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError("query", "must be a non-empty string")
    if "\x00" in value:
        raise ValidationError("query", "contains a NUL byte")
    _no_surrogates("query", value)
    if len(value) > MAX_QUERY_CHARS:
        raise ValidationError("query", f"is {len(value)} characters, at most {MAX_QUERY_CHARS}")
    return value


def limit(value: object, field: str = "limit", high: int = 1000) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise ValidationError(field, f"must be an integer from 1 to {high}")
    return value


def offset(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_BIGINT:
        raise ValidationError("offset", f"must be an integer from 0 to {MAX_BIGINT}")
    return value


_ASCII_DIGITS = re.compile(r"[0-9]+")


def ascii_digits(value: str) -> bool:
    """Only 0-9: ``str.isdigit`` and ``int`` also take '²' or Arabic-Indic digits."""
    return _ASCII_DIGITS.fullmatch(value) is not None


def restore_target(value: object, field: str = "eviction_id") -> int | str:
    """What to restore: an eviction number (a positive bigint, or its ASCII digits) or
    the evicted memory's id."""
    if isinstance(value, str) and ascii_digits(value):
        # (int() refuses more than 4300 digits with a ValueError of its own)
        value = int(value) if len(value) <= len(str(MAX_BIGINT)) else MAX_BIGINT + 1
    if isinstance(value, int) and not isinstance(value, bool):
        if not 1 <= value <= MAX_BIGINT:
            raise ValidationError(field, f"must be a number from 1 to {MAX_BIGINT}")
        return value
    return str(uuid_of(field, value))


def category(value: object) -> str | None:
    if value is None:
        return None
    if value not in CATEGORIES:
        raise ValidationError("category", f"must be one of {', '.join(CATEGORIES)}")
    return str(value)


def role(value: object) -> str | None:
    if value is None:
        return None
    if value not in ROLES:
        raise ValidationError("role", f"must be one of {', '.join(ROLES)}")
    return str(value)


def unit_interval(field: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ValidationError(field, "must be a number from 0 to 1")
    return float(value)


def tags(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Iterable):
        raise ValidationError("tags", "must be a list of strings")
    items = tuple(value)
    if len(items) > MAX_TAGS:
        raise ValidationError("tags", f"has {len(items)} tags, at most {MAX_TAGS}")
    for tag in items:
        if short_text("tags", tag, MAX_TAG, MAX_TEXT_BYTES) is None:
            raise ValidationError("tags", "must be a list of strings, got a null")
    return tuple(dict.fromkeys(items))


def metadata(value: object) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValidationError("metadata", "must be a JSON object")
    json_depth("metadata", value)
    loaded: dict[str, Any] = json.loads(_jsonb_safe("metadata", value))
    return loaded


def timestamp(field: str, value: object) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise ValidationError(field, "is not an ISO-8601 timestamp") from None
    if not isinstance(value, datetime):
        raise ValidationError(field, "must be a datetime")
    if value.tzinfo is None:
        raise ValidationError(field, "must be timezone-aware")
    try:
        utc = value.astimezone(UTC)
    except OverflowError:
        utc = None
    if utc is None or not MIN_TIMESTAMP <= utc <= MAX_TIMESTAMP:
        raise ValidationError(field, f"must be from {MIN_TIMESTAMP.isoformat()} to "
                                     f"{MAX_TIMESTAMP.isoformat()}")
    return utc


MAX_METADATA_FILTERS = 16


def metadata_filter(value: object) -> dict[str, Any]:
    """Equality filters on metadata keys: ``{"project": "atlas", "priority": 2}`` keeps
    memories whose metadata has each key with exactly that value (strings, numbers,
    booleans or null; nested values are not filters)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError("metadata", "must be an object of key: value filters")
    if len(value) > MAX_METADATA_FILTERS:
        raise ValidationError("metadata", f"has {len(value)} filters, at most "
                                          f"{MAX_METADATA_FILTERS}")
    for key, item in value.items():
        if not isinstance(key, str) or not key or len(key) > MAX_KEY:
            raise ValidationError("metadata", f"filter keys must be strings of 1 to "
                                              f"{MAX_KEY} characters")
        if item is not None and not isinstance(item, str | int | float | bool):
            raise ValidationError(field_name("metadata", key),
                                  "must be a string, number, boolean or null")
    _jsonb_safe("metadata", value)
    return dict(value)


LIST_ORDERS = ("newest", "key")


def list_order(value: object) -> str:
    if value not in LIST_ORDERS:
        raise ValidationError("order", f"must be one of {', '.join(LIST_ORDERS)}")
    return str(value)


def time_range(since: object, until: object) -> tuple[datetime | None, datetime | None]:
    """``since`` (inclusive) and ``until`` (exclusive) on ``created_at``."""
    start, end = timestamp("since", since), timestamp("until", until)
    if start is not None and end is not None and start >= end:
        raise ValidationError("until", "must be after since")
    return start, end


def store_item(raw: StoreItem | Mapping[str, Any], max_bytes: int) -> StoreItem:
    """Validate one memory to store and return it normalized."""
    data = raw.model_dump() if isinstance(raw, StoreItem) else dict(raw)
    unknown = set(data) - set(StoreItem.model_fields)
    if unknown:
        raise ValidationError(field_name("", sorted(unknown, key=str)[0]),
                              "is not a store argument")
    return StoreItem(
        content=content(data.get("content"), max_bytes),
        role=role(data.get("role")),
        session_id=short_text("session_id", data.get("session_id")),
        key=short_text("key", data.get("key")),
        category=category(data.get("category")),
        importance=unit_interval("importance", data.get("importance")),
        tags=tags(data.get("tags")),
        source=short_text("source", data.get("source")),
        metadata=metadata(data.get("metadata")),
        expires_at=timestamp("expires_at", data.get("expires_at")),
        created_at=timestamp("created_at", data.get("created_at")),
        valid_from=timestamp("valid_from", data.get("valid_from")),
        supersedes=memory_ids("supersedes", data.get("supersedes")),
    )


MAX_SUPERSEDES = 100


def memory_ids(field: str, value: object) -> tuple[UUID, ...]:
    """A list of memory ids (``supersedes``): distinct, at most ``MAX_SUPERSEDES``."""
    if value is None:
        return ()
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise ValidationError(field, "must be a list of memory ids")
    ids = tuple(dict.fromkeys(uuid_of(f"{field}[{i}]", item) for i, item in enumerate(value)))
    if len(ids) > MAX_SUPERSEDES:
        raise ValidationError(field, f"names {len(ids)} memories, at most {MAX_SUPERSEDES}")
    return ids


def as_of(value: object) -> datetime | None:
    """A point in time to answer as of: a timestamp of ``timestamp``'s range, not after
    now plus a day (a future validity is not knowledge memoryd has)."""
    moment = timestamp("as_of", value)
    if moment is not None and moment > clock.now() + timedelta(days=1):
        raise ValidationError("as_of", "must not be in the future")
    return moment


def store_items(items: object, max_bytes: int, max_items: int = 1000) -> list[StoreItem]:
    if isinstance(items, str | bytes) or not isinstance(items, Iterable):
        raise ValidationError("items", "must be a list of memories")
    checked: list[StoreItem] = []
    for index, item in enumerate(items):
        if not isinstance(item, StoreItem | Mapping):
            raise ValidationError(f"items[{index}]", "must be a mapping of store arguments")
        try:
            checked.append(store_item(item, max_bytes))
        except ValidationError as exc:
            raise ValidationError(f"items[{index}].{exc.field}", str(exc).split(": ", 1)[1]) \
                from None
    if not checked:
        raise ValidationError("items", "must not be empty")
    if len(checked) > max_items:
        raise ValidationError("items", f"has {len(checked)} memories, at most {max_items}")
    return checked


def required_text(field: str, value: object, max_len: int = MAX_KEY,
                  max_bytes: int = MAX_TEXT_BYTES) -> str:
    """``short_text`` that must be given."""
    checked = short_text(field, value, max_len, max_bytes)
    if checked is None:
        raise ValidationError(field, "must be a non-empty string")
    return checked


def entity_ref(field: str, value: object) -> str:
    """A knowledge-graph entity id (an entity's own, a relation's target, a query's start)."""
    return required_text(field, value, MAX_KEY, MAX_ENTITY_ID_BYTES)


def uuid_of(field: str, value: object) -> UUID:
    """A UUID given as one or as its text."""
    if isinstance(value, UUID):
        return value
    try:
        if not str(value).isascii():  # int(..., 16) would take other scripts' digits
            raise ValueError
        return UUID(str(value))
    except ValueError:
        raise ValidationError(field, "is not a UUID") from None


def memory_id(value: object) -> UUID:
    return uuid_of("memory_id", value)


def mode(value: object) -> str:
    if value not in RECALL_MODES:
        raise ValidationError("mode", "must be 'fast' or 'deep'")
    return str(value)


def depth(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_KG_DEPTH:
        raise ValidationError("depth", f"must be an integer from 0 to {MAX_KG_DEPTH}")
    return value


def boolean(field: str, value: object) -> bool:
    """A real boolean: ``"false"`` or ``0`` from a hand-crafted message is refused, not
    read as truthy (a dry run must never turn into a real one)."""
    if not isinstance(value, bool):
        raise ValidationError(field, "must be true or false")
    return value


def json_object(field: str, value: object) -> dict[str, Any]:
    """A mapping that survives JSON and jsonb (no NaN, NUL or lone surrogates)."""
    if not isinstance(value, Mapping):
        raise ValidationError(field, "must be a JSON object")
    json_depth(field, value)
    _jsonb_safe(field, value)
    return dict(value)


def json_depth(field: str, value: object, limit: int = MAX_JSON_DEPTH) -> None:
    """Refuse JSON values nested more than ``limit`` objects or arrays deep (the walk
    stops there, so a value nested thousands deep costs no recursion)."""
    level = [value]
    for _ in range(limit + 1):
        level = [child for item in level for child in _children(item)]
        if not level:
            return
    raise ValidationError(field, f"is nested more than {limit} levels deep")


def _children(value: object) -> Iterable[object]:
    if isinstance(value, Mapping):
        return value.values()
    if isinstance(value, list | tuple):
        return value
    return ()


_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


def json_text_depth(field: str, text: str, limit: int = MAX_JSON_DEPTH + 1) -> None:
    """Refuse a JSON document nested more than ``limit`` deep before it is parsed: the
    parser itself recurses, and a body of a million brackets would exhaust it. The text
    is decoded first: in another encoding's bytes, a character's half can pass for a
    quote and hide the brackets that follow it."""
    depth = 0
    for bracket in _NOT_BRACKET.sub("", _JSON_STRING.sub("", text)):
        depth += 1 if bracket in "[{" else -1
        if depth > limit:
            raise ValidationError(field, f"is nested more than {limit} levels deep")


def json_content_type(value: str | None) -> None:
    """A body's ``content-type`` must say JSON (``application/json``, or a
    ``+json`` type), so a form or a text is never read as JSON by accident; a
    ``charset`` parameter, if any, must be UTF-8, JSON's only encoding (RFC 8259)."""
    media, _, parameters = (value or "").partition(";")
    media = media.strip().lower()
    if media != "application/json" and not (media.startswith("application/")
                                            and media.endswith("+json")):
        raise UnsupportedMediaType("content-type", "must be application/json")
    for parameter in parameters.split(";"):
        name, _, given = parameter.partition("=")
        if name.strip().lower() == "charset" and \
                given.strip().strip('"').lower() not in ("utf-8", "utf8"):
            raise UnsupportedMediaType("content-type", "must have no charset but utf-8")


def json_body(raw: bytes, content_type: str | None, field: str = "body",
              max_depth: int = MAX_JSON_DEPTH) -> Any:
    """A request body as JSON: said to be JSON, in UTF-8 (415 otherwise: UTF-16 and
    UTF-32 are not guessed), nested at most ``max_depth`` deep, each object's keys
    distinct, and no NaN or Infinity (which JSON has not, and a number too large for a
    float is). A UTF-8 byte order mark is ignored, as RFC 8259 allows."""
    json_content_type(content_type)
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError:
        text = "\x00"
    if "\x00" in text:  # never in JSON, in UTF-16 or UTF-32 in every ASCII character
        raise UnsupportedMediaType(field, "is not UTF-8; JSON bodies must be UTF-8")
    json_text_depth(field, text, max_depth + 1)
    try:
        return json.loads(text, object_pairs_hook=_distinct_keys(field),
                          parse_constant=_no_constant(field), parse_float=_finite(field))
    except ValidationError:
        raise
    except (ValueError, RecursionError):  # RecursionError: the depth check's safety net
        raise ValidationError(field, "is not valid JSON") from None


def _distinct_keys(field: str) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    """An object holding a key twice is refused: parsers disagree on which value wins."""

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        found = dict(pairs)
        if len(found) != len(pairs):
            raise ValidationError(field, "has an object with the same key twice")
        return found
    return hook


def _no_constant(field: str) -> Callable[[str], Any]:
    def refuse(_constant: str) -> Any:
        raise ValidationError(field, "holds NaN or Infinity, which JSON has not")
    return refuse


def _finite(field: str) -> Callable[[str], float]:
    def parse(number: str) -> float:
        value = float(number)
        if not math.isfinite(value):
            raise ValidationError(field, "holds a number too large for a float")
        return value
    return parse


def field_name(parent: str, key: object, unnamed: str = "body") -> str:
    """The field a caller's key names below ``parent`` (``metadata.project``), or
    ``parent`` (``unnamed`` at the top) when the key cannot be shown: not text, too
    long, or holding a control character or a lone surrogate (no response could carry
    the name)."""
    ok = isinstance(key, str) and 0 < len(key) <= MAX_FIELD_NAME and key.isprintable() \
        and _encodes(key)
    if not ok:
        return parent or unnamed
    return f"{parent}.{key}" if parent else str(key)


def _encodes(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def job_name(value: object) -> str:
    """A maintenance job's name (the thin client's copy of the job list: see
    ``memoryd.schedules.names``)."""
    from memoryd.schedules.names import JOB_NAMES

    if value not in JOB_NAMES:
        raise ValidationError("job", f"must be one of {', '.join(JOB_NAMES)}")
    return str(value)


def entity(raw: object) -> Entity:
    """Validate a knowledge-graph entity given as ``Entity`` or a plain mapping."""
    if not isinstance(raw, Entity | Mapping):
        raise ValidationError("entity", "must be an Entity or a mapping")
    data = raw.model_dump() if isinstance(raw, Entity) else dict(raw)
    entity_id = entity_ref("entity.id", data.get("id"))
    entity_type = short_text("entity.type", data.get("type") or "entity", 128) or "entity"
    attributes = data.get("attributes") or {}
    if not isinstance(attributes, Mapping):
        raise ValidationError("entity.attributes", "must be a JSON object")
    json_depth("entity.attributes", attributes)
    _jsonb_safe("entity.attributes", attributes)
    return Entity(id=entity_id, type=entity_type, attributes=dict(attributes),
                  relations=_relations(data.get("relations") or []))


def _relations(relations: object) -> list[Relation]:
    if not isinstance(relations, list) or len(relations) > MAX_RELATIONS:
        raise ValidationError("entity.relations", f"must be a list of at most {MAX_RELATIONS}")
    parsed = []
    for index, rel in enumerate(relations):
        rel_data = rel.model_dump() if isinstance(rel, Relation) else rel
        if not isinstance(rel_data, Mapping):
            raise ValidationError(f"entity.relations[{index}]", "must be {target, type}")
        target = short_text(f"entity.relations[{index}].target", rel_data.get("target"),
                            MAX_KEY, MAX_ENTITY_ID_BYTES)
        rel_type = short_text(f"entity.relations[{index}].type", rel_data.get("type"),
                              MAX_RELATION_TYPE, MAX_RELATION_TYPE_BYTES)
        if target is None or rel_type is None:
            raise ValidationError(f"entity.relations[{index}]", "needs target and type")
        start, end = _validity(f"entity.relations[{index}]", rel_data)
        parsed.append(Relation(target=target, type=rel_type, valid_from=start, valid_to=end))
    return parsed


def _validity(field: str, rel_data: Mapping[str, Any]) -> tuple[datetime | None, datetime | None]:
    """A relation's optional ``valid_from`` and ``valid_to``: timestamps, the end after
    the start when both are given."""
    start = timestamp(f"{field}.valid_from", rel_data.get("valid_from"))
    end = timestamp(f"{field}.valid_to", rel_data.get("valid_to"))
    if start is not None and end is not None and end <= start:
        raise ValidationError(f"{field}.valid_to", "must be after valid_from")
    return start, end


def _jsonb_safe(field: str, value: Mapping[str, Any]) -> str:
    """``value`` as JSON text, which jsonb takes: neither NaN, NUL nor lone surrogates
    (the messages name what is wrong, never the value)."""
    try:
        encoded = json.dumps(dict(value), allow_nan=False, ensure_ascii=False)
    except TypeError:
        raise ValidationError(field, "holds a value that is not JSON (JSON has objects, "
                                     "arrays, strings, numbers, booleans and null)") from None
    except ValueError:
        raise ValidationError(field, "holds NaN or Infinity, or refers to itself") from None
    _no_surrogates(field, encoded)
    if "\\u0000" in encoded:  # json escapes control characters even without ensure_ascii
        raise ValidationError(field, "contains a NUL character")
    return encoded


def request(model: type[RequestT], payload: object, field: str = "body") -> RequestT:
    """A request body (a JSON object) read as ``model``, strictly: an unknown field or a
    value of the wrong type is a ``ValidationError`` naming that field."""
    if not isinstance(payload, Mapping):
        raise ValidationError(field, "must be a JSON object")
    unknown = set(payload) - set(model.model_fields)
    if unknown:
        raise ValidationError(field_name("", sorted(unknown, key=str)[0]),
                              "is not a known field")
    try:
        return model.model_validate(dict(payload), strict=True)
    except PydanticValidationError as exc:
        raise refusal(exc, field) from None


def refusal(exc: PydanticValidationError, field: str = "body") -> ValidationError:
    """pydantic's first error as memoryd's: its location and message, never its
    ``input_value`` (the caller's value, which its text quotes)."""
    first = exc.errors()[0]
    where = ""
    for part in first["loc"]:
        where = f"{where}[{part}]" if isinstance(part, int) else field_name(where, part)
    return ValidationError(where or field, first["msg"])


MAX_SESSION_MESSAGES = 100_000


def message_limit(value: object) -> int | None:
    """How many of a session's newest messages to read; None reads them all."""
    return None if value is None else limit(value, high=MAX_SESSION_MESSAGES)
