"""Agent events on `mnemod:{ns}:events`: parse and validate one stream entry.

An event has field `op` (add, access, update, remove, promote; `gc` is accepted from the CLI)
and field `data` (JSON). Anything else is rejected with an error naming the field, and the
caller moves the event to the dead-letter stream with that error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import orjson

from mnemod.config import Config
from mnemod.domain.validation import NewEntry, new_entry_from_json
from mnemod.errors import InvalidInputError
from mnemod.redisio.connection import check_text

OPS = ("add", "access", "update", "remove", "promote", "gc")
MAX_FIELDS = 8


@dataclass(frozen=True)
class Event:
    event_id: str
    op: str
    new: NewEntry | None = None  # add
    target: str = ""  # access, update, remove, promote
    fields: dict[str, Any] | None = None  # update
    dry_run: bool = False  # gc
    times: int = 1  # access: how many uses (a follower's answers, gathered)
    selected: bool = False  # access: resolve selections, not deliberate uses
    by: str = "agent"


def parse_event(event_id: str, raw: dict[str, str], config: Config) -> Event:
    """Validate one stream entry; raises InvalidInputError naming what is wrong. An add's
    entry and an update's fields are read here and checked by the engine as it applies
    them (Engine.add and update check whatever they are given, so checking here too did
    it twice): `located` names the event in what they raise."""
    where = event_where(event_id)
    if len(raw) > MAX_FIELDS:
        raise InvalidInputError("fields", f"{len(raw)} fields, at most {MAX_FIELDS}", where)
    check_text(raw, where)
    op = raw.get("op")
    if op is None:
        raise InvalidInputError("op", "missing", where)
    if op not in OPS:
        raise InvalidInputError("op", f"unknown op {op[:40]!r} (known: {', '.join(OPS)})", where)
    text = raw.get("data", "{}" if op == "gc" else None)
    if text is None:
        raise InvalidInputError("data", "missing", where)
    limit = config.limits.max_content_bytes * 2 + 16384
    if len(text) > limit:
        raise InvalidInputError("data", f"{len(text)} bytes, at most {limit}", where)
    data = _load(text, where)
    if not isinstance(data, dict):
        raise InvalidInputError("data", "must be a JSON object", where)
    by = raw.get("by", "agent")
    if by not in ("agent", "cli"):
        by = "agent"
    if op == "add":
        new = new_entry_from_json(data, config, where, check=False)
        return Event(event_id, op, new=new, by=by)
    if op == "gc":
        dry_run = data.get("dry_run", False)
        if not isinstance(dry_run, bool):
            raise InvalidInputError("dry_run", "must be true or false", where)
        return Event(event_id, op, dry_run=dry_run, by=by)
    target = data.get("id")  # an id, or an entry's key: one line, bounded
    if not isinstance(target, str) or not 0 < len(target) <= 200 or "\n" in target:
        raise InvalidInputError("id", "missing or not a valid id", where)
    if op == "update":
        fields = {k: v for k, v in data.items() if k != "id"}
        if isinstance(fields.get("fields"), dict) and len(fields) == 1:
            fields = fields["fields"]
        return Event(event_id, op, target=target, fields=fields, by=by)
    unknown = sorted(set(data) - ({"id", "times", "selected"} if op == "access" else {"id"}))
    if unknown:
        raise InvalidInputError(unknown[0], "unknown field", where)
    times, selected = data.get("times", 1), data.get("selected", False)
    if not isinstance(times, int) or isinstance(times, bool) or not 1 <= times <= 1_000_000:
        raise InvalidInputError("times", "must be a whole number 1–1000000", where)
    if not isinstance(selected, bool):
        raise InvalidInputError("selected", "must be true or false", where)
    return Event(event_id, op, target=target, by=by, times=times, selected=selected)


def _load(text: str, where: str) -> Any:
    """The JSON of `data`. orjson first (a third of the standard library's time); it refuses
    what the standard library reads (NaN, a lone surrogate "\\ud800", nesting past 1,024)
    as well as what it does not, so a refusal is read again by the standard library, which
    decides: the same data, or the same error, as from it alone. orjson reads integers
    beyond 64 bits as floats, which every field refuses as it refuses such integers."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInputError(
            "data", f"not valid JSON ({exc.msg} at position {exc.pos})", where
        ) from None
    except RecursionError:
        raise InvalidInputError("data", "nested too deeply", where) from None
    try:  # "\ud800" in the JSON: a lone surrogate no file or answer could hold
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidInputError("data", "holds a lone surrogate (\\ud800-\\udfff)", where) from None
    return data


def event_where(event_id: str) -> str:
    """How an error names the event it is about."""
    return f"event {event_id}"


def located(exc: InvalidInputError, event_id: str) -> InvalidInputError:
    """`exc` naming the event it is about (the engine's checks name none)."""
    return exc if exc.where else InvalidInputError(exc.field, exc.reason, event_where(event_id))


def stream_id_key(event_id: str) -> tuple[int, int]:
    """Stream ids compare as (milliseconds, sequence), not as strings."""
    ms, _, seq = event_id.partition("-")
    return (int(ms), int(seq or 0))


def is_applied(event_id: str, last_applied: str | None) -> bool:
    return last_applied is not None and stream_id_key(event_id) <= stream_id_key(last_applied)
