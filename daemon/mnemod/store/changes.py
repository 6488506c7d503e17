"""The changes one call makes to a namespace: add (with dedup), access, update, remove,
promote, merge, and a person's L2 edit taken in.

Functions over the engine, which keeps the state and the primitives they use (insert,
drop, touched, the lookups); each notes what it changed for the next commit and commits
at once with autosave (store.commits).
"""

from __future__ import annotations

import copy
from datetime import datetime
from typing import TYPE_CHECKING, Any

from mnemod.domain import retention
from mnemod.domain.keywords import extract_keywords, normalize_keywords
from mnemod.domain.merge import MergeKind, decide_merge, merge_into
from mnemod.domain.model import Entry
from mnemod.domain.validation import NewEntry, check_new_entry, check_update
from mnemod.errors import InvalidInputError
from mnemod.ids import new_id
from mnemod.store.l2_layer import Edit

if TYPE_CHECKING:
    from mnemod.store.engine import Engine


def add(engine: Engine, new: NewEntry, now: datetime | None = None, by: str | None = None) -> Entry:
    """Store a memory; returns the entry that holds it (an existing one after dedup)."""
    check_new_entry(new, engine.config)
    now = now or engine.clock.now()
    actor = by or engine.actor
    if new.id is not None:
        existing = engine.find(new.id)
        if existing is not None and engine.resolve_id(new.id) == existing.id:
            engine.last_outcome = "duplicate"
            return existing  # a retried add with a client-chosen id is a no-op
    if new.key is not None and new.key in engine.lookup.keys:
        fields: dict[str, Any] = {"content": new.content, "importance": new.importance}
        if new.tags:
            fields["tags"] = new.tags
        engine.last_outcome = "updated"
        return update(engine, engine.lookup.keys[new.key], fields, now=now, by=actor)
    created = new.created_at or now
    entry = Entry(
        id=new.id or new_id(created),
        type=new.type,
        content=new.content,
        created_at=created,
        updated_at=max(created, now),
        last_accessed_at=created,
        expires_at=None,
        key=new.key,
        importance=new.importance,
        keywords=keywords_for(engine, new.content, new.keywords),
        tags=tuple(dict.fromkeys(new.tags)),
        tier=new.tier,
        triggers=tuple(new.triggers),
        once=new.once,
        source=new.source,
        tokens=engine.counter.count(new.content),
    )
    entry.expires_at = retention.expires_at(engine.config.ttl, entry)
    match = engine.similar(entry)
    if match is not None and fold(engine, match[0], entry, now, actor, score=round(match[1], 3)):
        engine.last_outcome = "merged"
        return match[0]
    engine.insert(entry)
    engine.last_outcome = "added"
    engine.record(now, "add", entry.id, actor, type=entry.type, key=entry.key)
    engine.touched(entry.id, "add")
    engine.note_change()
    return entry


def access(
    engine: Engine,
    entry_id: str,
    now: datetime | None = None,
    selected: bool = False,
    times: int = 1,
) -> Entry:
    """Record a use (`times` uses, the last at `now`): extends the TTL and counts toward
    promotion. `selected` marks resolve selections, which ranking does not count as
    evidence of relevance."""
    entry = engine.get(entry_id)
    now = now or engine.clock.now()
    entry.access_count += times
    entry.selected_count += times if selected else 0
    entry.last_accessed_at = max(entry.last_accessed_at, now)
    if entry.id in engine.entries:
        entry.expires_at = retention.expires_at(engine.config.ttl, entry)
    engine.touched(entry.id, "access")
    engine.note_access()
    return entry


def update(
    engine: Engine,
    entry_id: str,
    fields: dict[str, Any],
    now: datetime | None = None,
    by: str | None = None,
) -> Entry:
    check_update(fields, engine.config)
    entry = engine.get(entry_id)
    now = now or engine.clock.now()
    in_l3 = entry.id in engine.entries
    old_type = entry.type
    if in_l3:
        engine.unindex(entry)
    if (
        "key" in fields
        and fields["key"] not in (None, entry.key)
        and fields["key"] in engine.lookup.keys
    ):
        if in_l3:
            engine.index(entry)
        raise InvalidInputError(
            "key", f"{fields['key']!r} already names entry {engine.lookup.keys[fields['key']]}"
        )
    for name, value in fields.items():
        setattr(entry, name, tuple(value) if isinstance(value, list) else value)
    if "content" in fields:
        entry.tokens = engine.counter.count(entry.content)
        if "keywords" not in fields:
            entry.keywords = keywords_for(engine, entry.content, None)
    elif "keywords" in fields:
        entry.keywords = tuple(
            normalize_keywords(fields["keywords"], engine.config.limits.max_keywords)
        )
    entry.updated_at = max(now, entry.updated_at)
    engine.record(now, "update", entry.id, by or engine.actor, fields=sorted(fields))
    engine.touched(entry.id, "update")
    if in_l3:
        entry.expires_at = retention.expires_at(engine.config.ttl, entry)
        engine.index(entry)
        engine._by_type[old_type] -= 1
        engine._by_type[entry.type] += 1
    engine.note_change()
    return entry


def remove(
    engine: Engine, entry_id: str, now: datetime | None = None, by: str | None = None
) -> Entry:
    entry = engine.get(entry_id)
    now = now or engine.clock.now()
    actor = by or engine.actor
    engine.archive(entry, "removed", now, actor)
    engine.record(now, "remove", entry.id, actor)
    engine.touched(entry.id, "remove")
    if entry.id in engine.entries:
        engine.drop(entry)
    else:
        del engine.l2_entries[entry.id]
    engine.note_change()
    return entry


def promote_many(engine: Engine, entries: list[Entry], now: datetime, by: str) -> None:
    """Move L3 entries into L2: one commit takes them out of L3 and into L2, and their
    types' files follow (store.l2_layer)."""
    promoted = [copy.copy(entry) for entry in entries]
    for entry in promoted:
        entry.expires_at = None
        entry.promotable = True
        entry.updated_at = max(now, entry.updated_at)
    for original, entry in zip(entries, promoted, strict=True):
        engine.drop(original)
        engine.l2_entries[entry.id] = entry
        engine.record(now, "promote", entry.id, by, type=entry.type)
        engine.touched(entry.id, "promote")
    engine.note_change()


def fold(
    engine: Engine, survivor: Entry, folded: Entry, now: datetime, by: str, **detail: Any
) -> bool:
    """Merge `folded` (the newer) into `survivor` as domain.merge.decide_merge says, the
    text that leaves archived first; False (nothing changed) when they stay apart."""
    decision = decide_merge(survivor, folded)
    if decision.kind is MergeKind.KEEP_APART:
        return False
    texts = {"older": copy.copy(survivor), "newer": folded}
    for role, reason in decision.archive:
        engine.archive(texts[role], reason, now, by)
    if folded.id in engine.entries:
        engine.drop(folded)
    words = _indexed(survivor)
    merge_into(survivor, folded, now, decision)
    survivor.expires_at = retention.expires_at(engine.config.ttl, survivor)
    for old_id in [folded.id, *folded.merged_from]:
        engine.lookup.alias(old_id, survivor.id)
    engine.reindex(survivor, words=_indexed(survivor) != words)
    engine.record(
        now, "merge", survivor.id, by, merged=[folded.id], kind=decision.kind.value,
        **detail,
    )  # fmt: skip
    engine.touched(survivor.id, "update")
    engine.touched(folded.id, "remove")
    engine.note_change()
    return True


def take_edit(engine: Engine, edit: Edit, now: datetime) -> None:
    for entry in edit.puts:
        if entry.id in engine.entries:
            engine.drop(engine.entries[entry.id])
        engine.l2_entries[entry.id] = entry
        engine.record(now, "edit", entry.id, "person", file=f"{edit.type}.md")
        engine.touched(entry.id, "update")
    for entry_id in edit.removed:
        gone = engine.l2_entries.pop(entry_id, None)
        if gone is not None:
            engine.archive(gone, f"deleted from {edit.type}.md", now, "person")
            engine.record(now, "remove", entry_id, "person", file=f"{edit.type}.md")
            engine.touched(entry_id, "remove")


def _indexed(entry: Entry) -> tuple[str, tuple[str, ...], str | None]:
    """What the lookup indexes an entry by (its words under its type, and its key)."""
    return entry.type, entry.keywords, entry.key


def keywords_for(engine: Engine, content: str, given: list[str] | None) -> tuple[str, ...]:
    limit = engine.config.limits.max_keywords
    return tuple(normalize_keywords(given, limit) if given else extract_keywords(content, limit))
