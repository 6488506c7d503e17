"""Validating what outside callers ask to store (events, CLI, API, import).

One place decides what a valid new entry or update is, so every edge rejects the same things
with the same message naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import re2  # google-re2: linear-time matching, so a hostile trigger cannot hang the daemon

from mnemod.clock import parse_time
from mnemod.config import Config
from mnemod.domain.model import TIERS
from mnemod.errors import InvalidInputError
from mnemod.ids import is_valid_id

_TRIGGER_MEMORY = 1 << 20  # bytes of RE2 program per pattern: bounds a pathological one


@dataclass
class NewEntry:
    content: str
    type: str = "context"
    importance: int = 3
    key: str | None = None
    tags: list[str] = field(default_factory=list)
    keywords: list[str] | None = None
    tier: str = "cold"
    triggers: list[str] = field(default_factory=list)
    once: bool = False
    created_at: datetime | None = None
    id: str | None = None
    source: str = ""


UPDATABLE = ("content", "importance", "key", "tags", "keywords", "tier", "triggers", "once", "type")


def check_new_entry(new: NewEntry, config: Config, where: str = "") -> NewEntry:
    """Raise InvalidInputError naming the first bad field; return `new` when it is fine."""
    check_content(new.content, config, where)
    if new.type not in config.types:
        raise InvalidInputError(
            "type", f"unknown type {new.type!r} (known: {', '.join(config.types)})", where
        )
    check_importance(new.importance, where)
    if new.tier not in TIERS:
        raise InvalidInputError("tier", f"must be one of {', '.join(TIERS)}", where)
    if new.key is not None:
        check_key(new.key, config, where)
    check_strings("tags", new.tags, config.limits.max_tags, 100, where)
    if new.keywords is not None:
        check_strings("keywords", new.keywords, config.limits.max_keywords, 100, where)
    check_triggers(new.triggers, config, where)
    check_unicode("source", new.source, where)
    if new.id is not None and not is_valid_id(new.id):
        raise InvalidInputError("id", "use 1–64 letters, digits, '_', '.', ':' or '-'", where)
    return new


def check_content(content: Any, config: Config, where: str = "") -> None:
    if not isinstance(content, str) or not content.strip():
        raise InvalidInputError("content", "must be a non-empty string", where)
    size = len(check_unicode("content", content, where))
    if size > config.limits.max_content_bytes:
        raise InvalidInputError(
            "content", f"{size} bytes is over the limit of {config.limits.max_content_bytes}", where
        )


def check_importance(value: Any, where: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 5:
        raise InvalidInputError("importance", "must be an integer from 1 to 5", where)


def check_key(value: Any, config: Config, where: str = "") -> None:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInputError("key", "must be a non-empty string", where)
    if len(value) > config.limits.max_key_length or any(c in value for c in "\r\n\0"):
        raise InvalidInputError(
            "key", f"at most {config.limits.max_key_length} characters, one line", where
        )
    check_unicode("key", value, where)


def check_strings(name: str, values: Any, limit: int, length: int, where: str = "") -> None:
    if not isinstance(values, list) or not all(isinstance(v, str) and v for v in values):
        raise InvalidInputError(name, "must be a list of non-empty strings", where)
    if len(values) > limit:
        raise InvalidInputError(name, f"{len(values)} items is over the limit of {limit}", where)
    if any(len(v) > length for v in values):
        raise InvalidInputError(name, f"each item at most {length} characters", where)
    for value in values:
        check_unicode(name, value, where)


def check_unicode(name: str, value: str, where: str = "") -> bytes:
    """`value` as UTF-8; InvalidInputError if it holds a lone surrogate (bytes that were not
    UTF-8, as a shell passes them, or an escaped "\\ud800"), which no file could store."""
    try:
        return value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(
            name, f"not valid UTF-8 text (at character {exc.start})", where
        ) from None


def check_triggers(triggers: Any, config: Config, where: str = "") -> None:
    check_strings(
        "triggers", triggers, config.limits.max_triggers, config.limits.max_trigger_length, where
    )
    for pattern in triggers:
        compile_trigger(pattern, where)


def compile_trigger(pattern: str, where: str = "") -> Any:
    """Compile case-insensitively with RE2; patterns RE2 refuses (backreferences,
    lookaround) are rejected rather than run on a backtracking engine."""
    options = re2.Options()
    options.case_sensitive = False
    options.log_errors = False
    options.max_mem = _TRIGGER_MEMORY
    try:
        return re2.compile(pattern, options)
    except Exception as exc:
        raise InvalidInputError(
            "triggers", f"{pattern!r} is not a supported regex ({exc})", where
        ) from exc


def new_entry_from_json(data: Any, config: Config, where: str = "", check: bool = True) -> NewEntry:
    """Build a NewEntry from an event or import payload; unknown fields are an error.
    Without `check`, its values are left to `check_new_entry` (which `Engine.add` runs
    on whatever it is given: an event's entry is checked once, as it is added)."""
    if not isinstance(data, dict):
        raise InvalidInputError("data", "must be a JSON object", where)
    allowed = {
        "content",
        "type",
        "importance",
        "key",
        "tags",
        "keywords",
        "tier",
        "triggers",
        "once",
        "created_at",
        "id",
        "source",
    }
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise InvalidInputError(unknown[0], "unknown field", where)
    if "content" not in data:
        raise InvalidInputError("content", "missing", where)
    created = data.get("created_at")
    if created is not None and not isinstance(created, str):
        raise InvalidInputError("created_at", "must be an ISO-8601 string", where)
    once = data.get("once", False)
    if not isinstance(once, bool):
        raise InvalidInputError("once", "must be true or false", where)
    source = data.get("source", "")
    if not isinstance(source, str) or len(source) > 200:
        raise InvalidInputError("source", "must be a string of at most 200 characters", where)
    type_ = data.get("type", "context")
    if not isinstance(type_, str):
        raise InvalidInputError("type", "must be a string", where)
    tier = data.get("tier", "cold")
    if not isinstance(tier, str):
        raise InvalidInputError("tier", "must be a string", where)
    key = data.get("key")
    entry_id = data.get("id")
    if entry_id is not None and not isinstance(entry_id, str):
        raise InvalidInputError("id", "must be a string", where)
    new = NewEntry(
        content=data["content"],
        type=type_,
        importance=data.get("importance", 3),
        key=key if key != "" else None,
        tags=data.get("tags", []),
        keywords=data.get("keywords"),
        tier=tier,
        triggers=data.get("triggers", []),
        once=once,
        created_at=parse_time(created, "created_at") if created else None,
        id=entry_id,
        source=source,
    )
    return check_new_entry(new, config, where) if check else new


def check_update(fields: dict[str, Any], config: Config, where: str = "") -> dict[str, Any]:
    """Validate the fields of an update; returns them unchanged when fine."""
    unknown = sorted(set(fields) - set(UPDATABLE))
    if unknown:
        raise InvalidInputError(
            unknown[0], f"cannot be updated (updatable: {', '.join(UPDATABLE)})", where
        )
    if not fields:
        raise InvalidInputError("data", "nothing to update", where)
    if "content" in fields:
        check_content(fields["content"], config, where)
    if "importance" in fields:
        check_importance(fields["importance"], where)
    if "key" in fields and fields["key"] is not None:
        check_key(fields["key"], config, where)
    if "tier" in fields and fields["tier"] not in TIERS:
        raise InvalidInputError("tier", f"must be one of {', '.join(TIERS)}", where)
    if "type" in fields and fields["type"] not in config.types:
        raise InvalidInputError("type", f"unknown type {fields['type']!r}", where)
    if "tags" in fields:
        check_strings("tags", fields["tags"], config.limits.max_tags, 100, where)
    if "keywords" in fields:
        check_strings("keywords", fields["keywords"], config.limits.max_keywords, 100, where)
    if "triggers" in fields:
        check_triggers(fields["triggers"], config, where)
    if "once" in fields and not isinstance(fields["once"], bool):
        raise InvalidInputError("once", "must be true or false", where)
    return fields
