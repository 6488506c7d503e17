"""Quick reads of what is committed, for the CLI beside a running writer or none: one entry,
the namespace's counts, without reading every entry.

At 100,000 entries the checkpoint is some 70 MB; reading it whole takes seconds. Its head
(format, log_seq, stats, the L2 entries) comes first in the file, and each L3 entry is one
JSON object starting with its id, so:

- `committed_stats` is the checkpoint's `stats` when no change-log record follows it;
- `committed_entry` finds the entry's object by its id's bytes, reads that object alone,
  and replays the records after the checkpoint that name the id.

Each answers None when it cannot be sure (an older checkpoint without those stats, records
after the checkpoint, an id that is a key label or a merged id, a file it cannot read that
way): the caller then reads everything (store.recovery.read_committed), which also says
what is wrong with a damaged file.
"""

from __future__ import annotations

import json
import mmap
import os
import re
from pathlib import Path
from typing import Any

import orjson

from mnemod.domain.model import Entry
from mnemod.errors import CorruptFileError, InvalidInputError
from mnemod.files.change_log import ChangeLog, leading_seq
from mnemod.files.checkpoint_head import Head, read_head
from mnemod.files.l3_store import STATS_FIELDS
from mnemod.store.commits import State
from mnemod.store.l2_layer import L2Files
from mnemod.store.paths import NamespacePaths
from mnemod.store.recovery import apply_record

_ENTRY_LIMIT = 4 * 1024 * 1024  # one entry's JSON: content is at most 64 KB by default
_FEW_IDS = 100  # ids looked for one by one (a find each) rather than in one pass
_ID_AT = re.compile(rb'[\[,]\{"id":"((?:[^"\\]|\\.)*)",')  # an L3 entry's start


def committed_stats(
    paths: NamespacePaths, most: int | None = None
) -> tuple[dict[str, Any], str | None] | None:
    """(the namespace's counts as `Engine.stats` gives them, the last event id applied) as
    committed now: the checkpoint's stats, moved by the records after it (the entries
    those name are read from the checkpoint as they were, in one pass over its ids).
    None when the checkpoint has no such stats or does not read this way, or when the
    records after it name more than `most` entries."""
    try:
        return _committed_stats(paths, most)
    except (Unsure, CorruptFileError, OSError, KeyError, TypeError):
        return None


def _committed_stats(
    paths: NamespacePaths, most: int | None
) -> tuple[dict[str, Any], str | None] | None:
    head = read_head(paths.index)
    if head is None or not all(name in head.stats for name in STATS_FIELDS):
        return None
    records, log, touched = records_after(paths, head)
    if most is not None and len(touched) > most:
        return None
    stats = {k: dict(v) if isinstance(v, dict) else v for k, v in head.stats.items()}
    state = _l2_state(head)
    for raw in _l3_objects(paths.index, head.entries_at, touched):
        state.entries[raw["id"]] = _entry(raw)
    _count(stats, state, touched, -1)
    _replay(paths, head, state, records, log)
    _count(stats, state, touched, +1)
    return stats, state.last_event_id


def records_after(
    paths: NamespacePaths, head: Head
) -> tuple[list[dict[str, Any]], ChangeLog | None, set[str]]:
    """The change-log records after the checkpoint, the log (None when it surely holds
    none after it: not opened), and the ids they name."""
    if none_after(paths.log_dir, head.log_seq):
        return [], None, set()
    log = ChangeLog(paths.log_dir, readonly=True)
    records = list(log.read_after(head.log_seq)) if log.last_seq > head.log_seq else []
    touched = {str(op.get("id") or op["entry"]["id"]) for r in records for op in _ops(r)}
    return records, log, touched


def none_after(folder: Path, seq: int) -> bool:
    """The change log surely holds no record after `seq`: its newest segment ends with a
    whole line that starts as a record of a seq at most `seq` (records are appended in
    order). Only that line's start is read: opening the log reads and checks its newest
    segment whole (0.25 s for the 80 MB record of a bulk import). False when it cannot
    tell (no such line: a torn end, an empty segment), and the log is opened."""
    segments = [p for p in folder.glob("*.jsonl") if p.stem.isdigit()] if folder.is_dir() else []
    if not segments:
        return True
    newest = max(segments, key=lambda p: int(p.stem))
    with newest.open("rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size == 0:
            return False
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as m:
            if m[size - 1 : size] != b"\n":
                return False
            start = m.rfind(b"\n", 0, size - 1) + 1
            found = leading_seq(m[start : start + 40])
    return found is not None and found <= seq


def replayed(
    paths: NamespacePaths,
    head: Head,
    l3: list[dict[str, Any]],
    records: list[dict[str, Any]],
    log: ChangeLog | None,
) -> State:
    """The L2 layer and the L3 entries `l3` (as the checkpoint holds them) once the records
    after the checkpoint are applied (Unsure: see `_replay`)."""
    state = _l2_state(head)
    for raw in l3:
        state.entries[raw["id"]] = _entry(raw)
    _replay(paths, head, state, records, log)
    return state


def _l2_state(head: Head) -> State:
    """A state holding the checkpoint's L2 entries (the L2 layer is small: all of it)."""
    state = State(last_event_id=head.last_event_id)
    for raw in head.l2:
        entry = _entry(raw)
        state.l2[entry.id] = entry
    return state


def _replay(
    paths: NamespacePaths,
    head: Head,
    state: State,
    records: list[dict[str, Any]],
    log: ChangeLog | None,
) -> None:
    """Apply the records after the checkpoint; unsure when a person edited an L2 file
    since mnemod last wrote it (an open would take that edit: the full read says it)."""
    written = dict(head.l2_written)
    for record in records:
        apply_record(state, record, log)
        written.update(record.get("l2_written") or {})
    if L2Files(paths.l2_dir).reconcile(state.l2, written):
        raise Unsure


def _ops(record: dict[str, Any]) -> list[dict[str, Any]]:
    ops = record.get("ops") or []
    if not isinstance(ops, list) or not all(isinstance(op, dict) for op in ops):
        raise Unsure
    return ops


def _count(stats: dict[str, Any], state: State, ids: set[str], sign: int) -> None:
    """Add (or take away) what the entries of `ids` in `state` count for."""
    for entry_id in ids:
        entry = state.entries.get(entry_id)
        if entry is not None:
            stats["entries"] += sign
            _bump(stats["by_type"], entry.type, sign)
            stats["promotable"] += sign * entry.promotable
            stats["tokens"] += sign * entry.tokens
        elif entry_id in state.l2:
            stats["l2"] += sign
            _bump(stats["l2_by_type"], state.l2[entry_id].type, sign)


def _bump(counts: dict[str, int], kind: str, sign: int) -> None:
    counts[kind] = counts.get(kind, 0) + sign
    if not counts[kind]:
        del counts[kind]


def committed_entry(paths: NamespacePaths, entry_id: str) -> tuple[Entry, str] | None:
    """(the entry, its layer) of the id as committed now; None when it is not found this
    way (see the module doc)."""
    try:
        return _committed_entry(paths, entry_id)
    except (Unsure, CorruptFileError, OSError):
        return None


def _committed_entry(paths: NamespacePaths, entry_id: str) -> tuple[Entry, str] | None:
    head = read_head(paths.index)
    if head is None:
        return None
    state = _l2_state(head)
    found = _l3_object(paths.index, head.entries_at, entry_id)
    if found is not None:
        state.entries[entry_id] = _entry(found)
    records, log, _ = records_after(paths, head)
    _replay(paths, head, state, records, log)
    if entry_id in state.entries:
        return state.entries[entry_id], "l3"
    if entry_id in state.l2:
        return state.l2[entry_id], "l2"
    return None


def _entry(raw: Any) -> Entry:
    try:
        return Entry.from_dict(raw, where="entry")
    except InvalidInputError as exc:
        raise Unsure from exc


class Unsure(Exception):
    """The fast read cannot tell: the caller reads everything."""


Unsure = Unsure


def _l3_object(path: Path, start: int, entry_id: str) -> dict[str, Any] | None:
    """The L3 entry object that starts with this id, read alone."""
    needle = b'{"id":' + orjson.dumps(entry_id) + b","
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as m:
        at = m.find(needle, start)
        return None if at < 0 else _object_at(m, at, entry_id)


def _l3_objects(path: Path, start: int, ids: set[str]) -> list[dict[str, Any]]:
    """The L3 entry objects of those ids: each looked for by its bytes when they are few,
    else found in one pass over every entry's id (a pass over 100,000 took 1.5 s)."""
    if len(ids) <= _FEW_IDS:
        return [o for o in (_l3_object(path, start, i) for i in sorted(ids)) if o is not None]
    found = []
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as m:
        for match in _ID_AT.finditer(m, start - 1):  # from the list's opening [
            entry_id = match.group(1).decode("utf-8", "replace")
            if entry_id in ids:
                found.append(_object_at(m, match.start() + 1, entry_id))
    return found


def _object_at(m: mmap.mmap, at: int, entry_id: str) -> dict[str, Any]:
    """The JSON object at `at` (an entry: under the content limit and a few fields)."""
    window = bytes(m[at : at + _ENTRY_LIMIT])
    try:
        value, _ = json.JSONDecoder().raw_decode(window.decode("utf-8", "replace"))
    except ValueError as exc:
        raise Unsure from exc
    if not isinstance(value, dict) or value.get("id") != entry_id:
        raise Unsure
    return value
