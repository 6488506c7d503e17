"""index.json: the L3 entries, the last applied event id, and a few stats.

Written atomically with the previous good file kept as index.json.bak. A file that does not
parse is never overwritten: it is set aside as `index.json.corrupt-<time>` after recovering
from .bak, or mnemod refuses to go on (CorruptIndexError → exit 1).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import structlog

from mnemod.clock import format_time
from mnemod.domain.model import Entry
from mnemod.errors import CorruptIndexError, InvalidInputError
from mnemod.files.atomic import atomic_write_chunks

FORMAT = "mnemod.l3/1"
log = structlog.get_logger("mnemod.l3")


@dataclass
class L3Snapshot:
    entries: list[Entry] = field(default_factory=list)
    last_event_id: str | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    recovered_from: Path | None = None


def load_index(path: Path) -> L3Snapshot:
    """Read index.json, falling back to index.json.bak; missing both means a new namespace."""
    backup = path.with_name(path.name + ".bak")
    if not path.exists():
        if backup.exists():
            snapshot = _parse(backup)
            snapshot.recovered_from = backup
            log.warning("l3.recovered", path=str(path), source=str(backup), reason="index missing")
            return snapshot
        return L3Snapshot()
    try:
        return _parse(path)
    except CorruptIndexError as primary:
        if not backup.exists():
            raise CorruptIndexError(
                path, f"{primary.reason}; no {backup.name} to recover from"
            ) from None
        try:
            snapshot = _parse(backup)
        except CorruptIndexError as secondary:
            raise CorruptIndexError(
                path, f"{primary.reason}; {backup.name} is unusable too: {secondary.reason}"
            ) from None
        aside = path.with_name(f"{path.name}.corrupt-{os.getpid()}-{_stamp()}")
        os.link(path, aside)
        log.error(
            "l3.recovered",
            path=str(path),
            source=str(backup),
            reason=primary.reason,
            corrupt_copy=str(aside),
        )
        snapshot.recovered_from = backup
        return snapshot


def _stamp() -> str:
    from datetime import UTC

    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S")


def _parse(path: Path) -> L3Snapshot:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise CorruptIndexError(path, f"cannot read: {exc.strerror}") from exc
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        line = getattr(exc, "lineno", None)
        raise CorruptIndexError(path, f"not valid JSON ({exc})", line) from exc
    if not isinstance(data, dict):
        raise CorruptIndexError(path, "top level must be a JSON object")
    if data.get("format") != FORMAT:
        raise CorruptIndexError(path, f"format must be {FORMAT!r}, found {data.get('format')!r}")
    entries_raw = data.get("entries")
    if not isinstance(entries_raw, list):
        raise CorruptIndexError(path, "entries must be a list")
    entries: list[Entry] = []
    seen: set[str] = set()
    for position, item in enumerate(entries_raw):
        try:
            entry = Entry.from_dict(item, where=f"entries[{position}]")
        except InvalidInputError as exc:
            raise CorruptIndexError(path, str(exc)) from exc
        if entry.id in seen:
            raise CorruptIndexError(path, f"entries[{position}]: duplicate id {entry.id}")
        seen.add(entry.id)
        entries.append(entry)
    last = data.get("last_event_id")
    if last is not None and not isinstance(last, str):
        raise CorruptIndexError(path, "last_event_id must be a string or null")
    stats = data.get("stats") if isinstance(data.get("stats"), dict) else {}
    return L3Snapshot(entries=entries, last_event_id=last, stats=dict(stats or {}))


def entry_json(entry: Entry) -> str:
    """One entry exactly as index.json holds it (compact, non-ASCII kept): the same text as
    `json.dumps(..., ensure_ascii=False, separators=(",", ":"))` in a seventh of the time."""
    return orjson.dumps(entry.to_dict()).decode()


class EntryTexts:
    """Each L3 entry's `entry_json`, kept between saves: the owner calls `forget` on every
    change of an entry, and an entry replaced by another object is serialized again.

    What is not serialized yet (the entries read at start, and those changed since) can be
    serialized ahead of the save in slices (`warm`): all at once, the entries read at start
    take 0.3 s at 10,000 entries and 5 s at 100,000, and a busy agent's resolves change
    about a thousand entries every two seconds; a daemon that left them to the snapshot
    would stall requests that long."""

    def __init__(self, loaded: Iterable[Entry] = ()) -> None:
        self._kept: dict[str, tuple[Entry, str]] = {}
        self._loaded = list(loaded)
        self._next = 0
        self._changed: dict[str, None] = {}  # forgotten since

    @property
    def cold(self) -> bool:
        """Entries wait for `warm`."""
        return self._next < len(self._loaded) or bool(self._changed)

    def warm(self, seconds: float, current: Mapping[str, Entry]) -> None:
        """Serialize waiting entries for about `seconds`: those read at start, then those
        changed since, as `current` holds them now (gone ones are skipped). One changed
        again later is forgotten again; one replaced by another object is serialized again
        by `of`, which checks that the kept text belongs to the same object."""
        deadline = time.monotonic() + seconds
        kept, loaded = self._kept, self._loaded
        while self._next < len(loaded):
            entry = loaded[self._next]
            self._next += 1
            if entry.id not in kept:
                kept[entry.id] = (entry, entry_json(entry))
            if time.monotonic() >= deadline:
                return
        self._loaded, self._next = [], 0
        changed = self._changed
        while changed:
            entry_id, _ = changed.popitem()  # the newest: O(1), where the oldest is not
            found = current.get(entry_id)
            if found is not None and entry_id not in kept:
                kept[entry_id] = (found, entry_json(found))
            if time.monotonic() >= deadline:
                return

    def forget(self, entry_id: str) -> None:
        self._kept.pop(entry_id, None)
        self._changed[entry_id] = None

    def of(self, entries: Iterable[Entry]) -> list[str]:
        """The texts of `entries` (all the owner holds: nothing is left to warm after)."""
        kept = self._kept
        out = []
        for entry in entries:
            pair = kept.get(entry.id)
            if pair is None or pair[0] is not entry:
                pair = kept[entry.id] = (entry, entry_json(entry))
            out.append(pair[1])
        self._loaded, self._next = [], 0
        self._changed.clear()
        return out


def save_index(
    path: Path, snapshot: L3Snapshot, now: datetime, stored: Sequence[str] | None = None
) -> None:
    """Write durably; the previous good file becomes index.json.bak. Entries keep their
    order (insertion order), which resolve uses to tell conversation neighbours apart.

    `stored` is each entry already as `entry_json`, in the same order: the engine keeps
    those texts between saves (`EntryTexts`), so a snapshot serializes only what changed
    (serializing every entry was most of a save: 0.3 s at 10,000 entries, 5 s at 100,000)."""
    texts = stored if stored is not None else [entry_json(e) for e in snapshot.entries]
    head = {
        "format": FORMAT,
        "last_event_id": snapshot.last_event_id,
        "saved_at": format_time(now),
        "stats": snapshot.stats,
    }
    opening = json.dumps(head, ensure_ascii=False, separators=(",", ":"))[:-1]
    atomic_write_chunks(path, _index_chunks(opening, texts), backup=True)


def _index_chunks(opening: str, texts: Sequence[str], per_chunk: int = 256) -> Iterator[bytes]:
    """The file in pieces of `per_chunk` entries. Joined and encoded whole, a 10,000-entry
    index is three C calls of 5-15 ms each that hold the GIL; the daemon writes snapshots
    on a thread beside the one answering requests, which would wait that long."""
    yield f'{opening},"entries":['.encode()
    for start in range(0, len(texts), per_chunk):
        lead = "," if start else ""
        yield (lead + ",".join(texts[start : start + per_chunk])).encode("utf-8")
    yield b"]}\n"


class IndexWriter:
    """Writes snapshots of one index.json from any thread, never an older over a newer: the
    daemon writes a snapshot in the background while the engine goes on, and the engine may
    meanwhile save another at once (an L2 change). A snapshot taken before one that is
    already on disk is dropped, as the later one holds all it held."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._taken = 0  # only the engine's thread takes snapshots
        self._written = 0

    def job(self, snapshot: L3Snapshot, now: datetime, stored: Sequence[str]) -> Callable[[], bool]:
        """The write of `snapshot` (see `save_index`), to run here or on another thread; it
        returns False when a later snapshot was written first."""
        self._taken += 1
        taken = self._taken

        def write() -> bool:
            with self._lock:
                if taken < self._written:
                    return False
                save_index(self.path, snapshot, now, stored)
                self._written = taken
                return True

        return write
