"""The memory entry and its JSON shape (the field names of docs/design.md §1, used in files
and --json)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from datetime import datetime
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
    keywords: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    tier: str = "cold"
    triggers: list[str] = field(default_factory=list)
    once: bool = False
    access_count: int = 0
    selected_count: int = 0  # how many of the accesses were resolve selecting it
    promotable: bool = False
    merged_from: list[str] = field(default_factory=list)
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
        reader = _FieldReader(data, where)
        entry = cls(
            id=reader.text("id"),
            type=reader.text("type"),
            content=reader.text("content", allow_empty=True),
            created_at=reader.time("created_at"),
            updated_at=reader.time("updated_at"),
            last_accessed_at=reader.time("last_accessed_at"),
            expires_at=reader.optional_time("expires_at"),
            key=reader.optional_text("key"),
            importance=reader.integer("importance", 3),
            keywords=reader.words("keywords"),
            tags=reader.words("tags"),
            tier=reader.text("tier", default="cold"),
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

    def strings(self, name: str) -> list[str]:
        value = self.data.get(name) or []
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise self._fail(name, "must be a list of strings")
        return list(value)

    def words(self, name: str) -> list[str]:
        """`strings`, each stored once however many entries hold it: keywords repeat across
        entries, and a separate copy of each took 7 MB at 10,000 entries."""
        return [sys.intern(word) for word in self.strings(name)]

    def time(self, name: str) -> datetime:
        return parse_time(self.text(name), name)

    def optional_time(self, name: str) -> datetime | None:
        value = self.data.get(name)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self._fail(name, "must be an ISO-8601 string or null")
        return parse_time(value, name)
