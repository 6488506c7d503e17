"""The memory entry and its JSON shape (the field names of docs/design.md §1, used in files
and --json)."""

from __future__ import annotations

import operator
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from mnemod.clock import format_time, parse_time
from mnemod.errors import InvalidInputError
from mnemod.ids import is_valid_id

Tier = Literal["hot", "warm", "cold"]
TIERS: tuple[str, ...] = ("hot", "warm", "cold")
DEFAULT_TYPES: tuple[str, ...] = ("context", "preference", "progress", "relation", "insight")
Layer = Literal["l1", "l2", "l3"]


@dataclass(slots=True)
class Entry:
    """One memory. L3 entries live in index.json; promoted ones (L2) keep every field."""

    id: str
    type: str
    content: str
    created_at: datetime
    updated_at: datetime
    last_accessed_at: datetime
    expires_at: datetime | None
    key: str | None = None
    importance: int = 3
    keywords: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    tier: str = "cold"
    triggers: tuple[str, ...] = ()
    once: bool = False
    access_count: int = 0
    selected_count: int = 0  # how many of the accesses were resolve selecting it
    promotable: bool = False
    merged_from: tuple[str, ...] = ()
    source: str = ""
    tokens: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type,
            "key": self.key,
            "content": self.content,
            "importance": self.importance,
            "keywords": list(self.keywords),
            "tags": list(self.tags),
            "tier": self.tier,
            "triggers": list(self.triggers),
            "once": self.once,
            "created_at": format_time(self.created_at),
            "updated_at": format_time(self.updated_at),
            "last_accessed_at": format_time(self.last_accessed_at),
            "access_count": self.access_count,
            "selected_count": self.selected_count,
            "expires_at": None if self.expires_at is None else format_time(self.expires_at),
            "promotable": self.promotable,
            "merged_from": list(self.merged_from),
            "source": self.source,
            "tokens": self.tokens,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "") -> Entry:
        """Strict reader for stored entries (index.json, L2, import): names the bad field."""
        entry = _read_written(data)
        return entry if entry is not None else _read_strictly(data, where)


def _read_strictly(data: dict[str, Any], where: str) -> Entry:
    """Any stored entry, each field checked in turn: the first bad one is named."""
    reader = _FieldReader(data, where)
    entry = Entry(
        id=reader.text("id"),
        type=sys.intern(reader.text("type")),
        content=reader.text("content", allow_empty=True),
        created_at=reader.time("created_at"),
        updated_at=reader.time("updated_at"),
        last_accessed_at=reader.time("last_accessed_at"),
        expires_at=reader.optional_time("expires_at"),
        key=reader.optional_text("key"),
        importance=reader.integer("importance", 3),
        keywords=reader.words("keywords"),
        tags=reader.words("tags"),
        tier=sys.intern(reader.text("tier", default="cold")),
        triggers=reader.strings("triggers"),
        once=reader.boolean("once"),
        access_count=reader.integer("access_count", 0),
        selected_count=reader.integer("selected_count", 0),
        promotable=reader.boolean("promotable"),
        merged_from=reader.strings("merged_from"),
        source=reader.text("source", default="", allow_empty=True),
        tokens=reader.integer("tokens", 0),
    )
    if not is_valid_id(entry.id):
        raise InvalidInputError("id", f"not a valid id: {entry.id!r}", where)
    if entry.tier not in TIERS:
        raise InvalidInputError("tier", f"must be one of {', '.join(TIERS)}", where)
    if not 1 <= entry.importance <= 5:
        raise InvalidInputError("importance", "must be 1–5", where)
    return entry


# the fields as to_dict writes them, fetched from an entry of exactly those in one call
WRITTEN_FIELDS = (
    "id", "type", "key", "content", "importance", "keywords", "tags", "tier", "triggers",
    "once", "created_at", "updated_at", "last_accessed_at", "access_count", "selected_count",
    "expires_at", "promotable", "merged_from", "source", "tokens",
)  # fmt: skip
_ALL_FIELDS = operator.itemgetter(*WRITTEN_FIELDS)


def _read_written(data: Any) -> Entry | None:
    """An entry exactly as mnemod writes one, read in a fifth of the strict reader's time
    (index.json holds 100,000 of them); None for anything else, which the strict reader
    then reads or refuses, naming the field. It accepts nothing the strict reader refuses
    and reads what it accepts to the same entry. Equal times share one datetime (an entry
    never accessed or updated holds one time three times)."""
    if type(data) is not dict:
        return None
    try:  # an entry with every field written, as nearly all are: one C call
        values = _ALL_FIELDS(data) if len(data) == len(WRITTEN_FIELDS) else _with_defaults(data)
    except KeyError:
        values = _with_defaults(data)
    (entry_id, kind, key, content, importance, keywords, tags, tier, triggers, once,
     created_text, updated_text, accessed_text, accesses, selected, expires_text,
     promotable, merged, source, tokens) = values  # fmt: skip
    if not (
        type(entry_id) is str
        and type(kind) is str
        and kind
        and type(content) is str
        and (key is None or type(key) is str)
        and type(tier) is str
        and tier in TIERS
        and type(source) is str
        and type(importance) is int
        and 1 <= importance <= 5
        and type(accesses) is int
        and type(selected) is int
        and type(tokens) is int
        and type(once) is bool
        and type(promotable) is bool
        and is_valid_id(entry_id)
    ):
        return None
    created = _written_time(created_text)
    updated = _written_time(updated_text, created)
    # never accessed since made: its creation
    accessed = _written_time(accessed_text, created if accessed_text == _text(created) else updated)
    expires = None if expires_text is None else _written_time(expires_text, accessed)
    if created is None or updated is None or accessed is None:
        return None
    if expires is None and expires_text is not None:
        return None
    # most lists are empty: `[] == []` before a call
    keywords = () if keywords == [] else _written_words(keywords)
    tags = () if tags == [] else _written_words(tags)
    triggers = () if triggers == [] else _written_strings(triggers)
    merged = () if merged == [] else _written_strings(merged)
    if keywords is None or tags is None or triggers is None or merged is None:
        return None
    return Entry(
        entry_id,
        sys.intern(kind),  # a few types and tiers, each held once for every entry
        content,
        created[0],
        updated[0],
        accessed[0],
        None if expires is None else expires[0],
        key or None,
        importance,
        keywords,
        tags,
        sys.intern(tier),
        triggers,
        once,
        accesses,
        selected,
        promotable,
        merged,
        source,
        tokens,
    )


def _with_defaults(data: dict[str, Any]) -> tuple[Any, ...]:
    """The fields of an entry missing some (written by an older mnemod): each its default."""
    get = data.get
    return (
        get("id"), get("type"), get("key"), get("content"), get("importance", 3),
        get("keywords"), get("tags"), get("tier", "cold"), get("triggers"), get("once", False),
        get("created_at"), get("updated_at"), get("last_accessed_at"), get("access_count", 0),
        get("selected_count", 0), get("expires_at"), get("promotable", False),
        get("merged_from"), get("source", ""), get("tokens", 0),
    )  # fmt: skip


def _written_time(
    text: Any, previous: tuple[datetime, str] | None = None
) -> tuple[datetime, str] | None:
    """(the time, its text) of a time as mnemod writes it (UTC, whole milliseconds); the
    previous field's datetime when the text is the same."""
    if type(text) is not str:
        return None
    if previous is not None and previous[1] == text:
        return previous
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is not UTC or moment.microsecond % 1000:
        return None
    return moment, text


def _text(time: tuple[datetime, str] | None) -> str | None:
    return None if time is None else time[1]


def _written_words(value: Any) -> tuple[str, ...] | None:
    if not value and (value is None or value == []):
        return ()
    if type(value) is not list:
        return None
    try:
        return tuple(map(sys.intern, value))  # a str or nothing: intern refuses the rest
    except TypeError:
        return None


def _written_strings(value: Any) -> tuple[str, ...] | None:
    if not value and (value is None or value == []):
        return ()
    if type(value) is not list or not all(type(item) is str for item in value):
        return None
    return tuple(value)


class _FieldReader:
    """Typed access to a JSON object, raising InvalidInputError naming the field."""

    def __init__(self, data: dict[str, Any], where: str) -> None:
        if not isinstance(data, dict):
            raise InvalidInputError("entry", "must be a JSON object", where)
        self.data = data
        self.where = where

    def _fail(self, name: str, reason: str) -> InvalidInputError:
        return InvalidInputError(name, reason, self.where)

    def text(self, name: str, default: str | None = None, allow_empty: bool = False) -> str:
        value = self.data.get(name, default)
        if not isinstance(value, str):
            raise self._fail(name, "missing" if value is None else "must be a string")
        if not value and not allow_empty:
            raise self._fail(name, "must not be empty")
        return value

    def optional_text(self, name: str) -> str | None:
        value = self.data.get(name)
        if value is None or value == "":
            return None
        if not isinstance(value, str):
            raise self._fail(name, "must be a string or null")
        return value

    def integer(self, name: str, default: int) -> int:
        value = self.data.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._fail(name, "must be an integer")
        return value

    def boolean(self, name: str) -> bool:
        value = self.data.get(name, False)
        if not isinstance(value, bool):
            raise self._fail(name, "must be true or false")
        return value

    def strings(self, name: str) -> tuple[str, ...]:
        value = self.data.get(name) or []
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise self._fail(name, "must be a list of strings")
        return tuple(value)

    def words(self, name: str) -> tuple[str, ...]:
        """`strings`, each stored once however many entries hold it: keywords repeat across
        entries, and a separate copy of each took 7 MB at 10,000 entries."""
        return tuple(map(sys.intern, self.strings(name)))

    def time(self, name: str) -> datetime:
        return parse_time(self.text(name), name)

    def optional_time(self, name: str) -> datetime | None:
        value = self.data.get(name)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self._fail(name, "must be an ISO-8601 string or null")
        return parse_time(value, name)
