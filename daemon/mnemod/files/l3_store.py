"""index.json: the checkpoint of a namespace — its L3 and L2 entries as of one change-log
record (`log_seq`), the last applied event id, and a few stats.

Format `mnemod.l3/2`. A file of the older `mnemod.l3/1` (the L3 entries only, the L2 files
being their own truth) still reads, with `l2` None; the first checkpoint after it keeps a
copy as index.json.l3-1.

Written atomically with the previous good file kept as index.json.bak. A file that does not
parse is never overwritten: it is set aside as `index.json.corrupt-<time>` after recovering
from .bak, or mnemod refuses to go on (CorruptIndexError → exit 1).
"""

from __future__ import annotations

import itertools
import json
import operator
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, fields
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import orjson
import structlog

from mnemod.clock import format_time
from mnemod.domain.model import Entry
from mnemod.errors import CorruptIndexError, InvalidInputError
from mnemod.files.atomic import atomic_write_chunks
from mnemod.files.checkpoint_head import ENTRIES_MARK, FORMAT, read_head_stat
from mnemod.files.entries_cache import (
    cache_path,
    entry_args,
    read_cache,
    read_records,
    record_bytes,
    save_cache,
)
from mnemod.files.entry_texts import (
    Source,
    Stored,
    entry_json,
    file_identity,
    reference,
    span,
)
from mnemod.files.listing_file import (
    Row,
    identity,
    listing_path,
    read_listing,
    row_of,
    save_listing,
)

_NEXT_ENTRY = b',{"id":"'  # between two entries (inside a string a quote is escaped)
FORMAT_V1 = "mnemod.l3/1"
_WRITTEN_FIELDS = frozenset(f.name for f in fields(Entry))  # Entry.to_dict's keys
_OPENING = len(_NEXT_ENTRY) - 1  # an entry's `{"id":"`
_SHIFTED = reference(1, 0)  # files.entry_texts.reference, as a factor
# the checkpoint's `stats`, all of them there since the format's readers may answer from them
STATS_FIELDS = ("entries", "by_type", "l2", "l2_by_type", "promotable", "tokens")
log = structlog.get_logger("mnemod.l3")


@dataclass
class L3Snapshot:
    entries: list[Entry] = field(default_factory=list)
    last_event_id: str | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    recovered_from: Path | None = None
    log_seq: int = 0  # the last change-log record it holds
    l2: list[Entry] | None = None  # None: a v1 file, the L2 files hold the L2 entries
    l2_written: dict[str, str] = field(default_factory=dict)  # type -> digest last written
    format: str = FORMAT
    # where each L3 entry's object lies in the file read (files.entry_texts: a checkpoint
    # copies an unchanged entry's bytes from there), for the entries written as mnemod
    # writes them; and that file, to open it again
    refs: dict[str, int] = field(default_factory=dict)
    source: tuple[Path, os.stat_result] | None = None

    def open_source(self) -> Source | None:
        """The file the snapshot was read from, open, if it is unchanged since."""
        if self.source is None or not self.refs:
            return None
        return Source.open(*self.source)


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
    cached = _cached(path)
    if cached is not None:
        return cached
    try:
        with path.open("rb") as handle:
            seen = os.fstat(handle.fileno())
            raw = handle.read()
    except OSError as exc:
        raise CorruptIndexError(path, f"cannot read: {exc.strerror}") from exc
    streamed = _streamed(path, raw)
    if streamed is not None:
        streamed.source = (path, seen)
        return streamed
    try:
        data = _loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        line = getattr(exc, "lineno", None)
        raise CorruptIndexError(path, f"not valid JSON ({exc})", line) from exc
    return _snapshot(path, data)


def _streamed(path: Path, raw: bytes) -> L3Snapshot | None:
    """A checkpoint as `save_index` writes it (its head, then the L3 entries as the last
    field), read a slice of entries at a time: parsed whole, the file's 100,000 objects
    were all alive at once beside the entries made of them, a peak of some 300 MB that
    the process kept. None for any other file, which is then parsed whole."""
    mark = raw.find(ENTRIES_MARK)
    end = len(raw)  # the end of raw.rstrip(), without a copy of the file
    while end and raw[end - 1 : end].isspace():
        end -= 1
    if mark < 0 or raw[max(end - 2, 0) : end] != b"]}":
        return None
    try:
        head = orjson.loads(raw[:mark] + b"}")
        if not isinstance(head, dict) or "entries" in head:
            return None
        slices = _Slices(raw, mark + len(ENTRIES_MARK), end - 2, refs={})
        head["entries"] = slices
        snapshot = _snapshot(path, head)
        snapshot.refs = slices.refs or {}
        return snapshot
    except orjson.JSONDecodeError:
        return None


def _cached(path: Path) -> L3Snapshot | None:
    """A checkpoint whose L3 entries are in the entries cache beside it
    (files.entries_cache), read from there: the head from the file (only its first bytes
    read), the entries from the cache. None when there is no cache of exactly this file,
    or it does not load."""
    found = read_head_stat(path)
    if found is None:
        return None
    head, seen = found
    named = identity(head.log_seq, head.last_event_id, head.saved_at, seen)
    loaded = read_records(cache_path(path), named)
    if loaded is None:
        return None
    records, refs = loaded
    try:
        entries = [Entry(*args) for args in entry_args(records)]
        if len(entries) != len(refs):
            raise ValueError("not one record an entry")
    except (TypeError, ValueError, EOFError):  # a record not of an entry
        log.warning("entries_cache.unreadable", path=str(path))
        return None
    data = {
        "format": FORMAT,
        "log_seq": head.log_seq,
        "last_event_id": head.last_event_id,
        "stats": head.stats,
        "l2": head.l2,
        "l2_written": head.l2_written,
        "entries": [],
    }
    try:
        snapshot = _snapshot(path, data)
    except CorruptIndexError:
        return None  # the JSON path names what is wrong
    ids = [entry.id for entry in entries]
    known = set(ids)
    if len(known) != len(ids) or any(entry.id in known for entry in snapshot.l2 or []):
        return None
    snapshot.entries = entries
    snapshot.refs = dict(zip(ids, refs, strict=True))
    snapshot.source = (path, seen)
    return snapshot


def entry_slices(raw: bytes, start: int, end: int) -> Iterable[Any]:
    """The raw L3 entries of a checkpoint `raw` (its list's items between `start` and
    `end`), parsed a slice at a time as they are iterated."""
    return _Slices(raw, start, end)


class _Slices(list[Any]):
    """The raw L3 entries of a checkpoint, parsed a slice (of about `size` bytes) at a
    time as they are iterated (`_entries`); orjson.JSONDecodeError when one does not
    parse, and the file is then parsed whole. Given `refs`, it notes there where each
    entry written as mnemod writes one lies in `raw` (files.entry_texts.reference)."""

    def __init__(
        self,
        raw: bytes,
        start: int,
        end: int,
        size: int = 1 << 18,
        refs: dict[str, int] | None = None,
    ) -> None:
        super().__init__()
        self.raw, self.start, self.end, self.size = raw, start, end, size
        self.refs = refs

    def __iter__(self) -> Iterator[Any]:
        raw, start, end = self.raw, self.start, self.end
        while start < end:
            cut = raw.find(_NEXT_ENTRY, start + self.size, end) if start + self.size < end else -1
            stop = end if cut < 0 else cut
            parsed = orjson.loads(b"[" + raw[start:stop] + b"]")
            if self.refs is not None:
                _note_spans(raw, start, stop, parsed, self.refs)
            yield from parsed
            start = stop + 1


def _note_spans(raw: bytes, start: int, stop: int, parsed: list[Any], refs: dict[str, int]) -> None:
    """Where each of `parsed` (the objects of raw[start:stop]) lies, when all of them have
    exactly the fields mnemod writes: then none holds an object, so every `,{"id":"` in
    the slice is between two of them. In C calls over the slice (a loop over the entries
    was a tenth of an open)."""
    try:
        if not all(map(operator.eq, map(dict.keys, parsed), itertools.repeat(_WRITTEN_FIELDS))):
            return
        pieces = raw[start:stop].split(_NEXT_ENTRY)
        if len(pieces) != len(parsed):
            return
        # an object after the first is `{"id":"` and what follows the separator
        lengths = [len(pieces[0]), *map(_OPENING.__add__, map(len, pieces[1:]))]
        starts = itertools.accumulate(map((1).__add__, lengths[:-1]), initial=start)
        packed = map(operator.or_, map(_SHIFTED.__mul__, starts), lengths)
        refs.update(zip(map(operator.itemgetter("id"), parsed), packed, strict=True))
    except TypeError:
        return  # not all objects, or an id that is not a string


def _snapshot(path: Path, data: Any) -> L3Snapshot:
    if not isinstance(data, dict):
        raise CorruptIndexError(path, "top level must be a JSON object")
    kind = data.get("format")
    if kind not in (FORMAT, FORMAT_V1):
        raise CorruptIndexError(path, f"format must be {FORMAT!r}, found {kind!r}")
    seen: set[str] = set()
    entries = _entries(path, data.get("entries"), "entries", seen)
    l2 = None if kind == FORMAT_V1 else _entries(path, data.get("l2", []), "l2", seen)
    log_seq = data.get("log_seq", 0) if kind == FORMAT else 0
    if not isinstance(log_seq, int) or isinstance(log_seq, bool) or log_seq < 0:
        raise CorruptIndexError(path, "log_seq must be a non-negative integer")
    written = data.get("l2_written", {})
    if not isinstance(written, dict) or not all(isinstance(v, str) for v in written.values()):
        raise CorruptIndexError(path, "l2_written must map types to digests")
    last = data.get("last_event_id")
    if last is not None and not isinstance(last, str):
        raise CorruptIndexError(path, "last_event_id must be a string or null")
    stats = data.get("stats") if isinstance(data.get("stats"), dict) else {}
    return L3Snapshot(
        entries=entries,
        last_event_id=last,
        stats=dict(stats or {}),
        log_seq=log_seq,
        l2=l2,
        l2_written=dict(written),
        format=str(kind),
    )


def _entries(path: Path, raw: Any, name: str, seen: set[str]) -> list[Entry]:
    if not isinstance(raw, list):
        raise CorruptIndexError(path, f"{name} must be a list")
    entries: list[Entry] = []
    read = Entry.from_dict
    for position, item in enumerate(raw):
        try:
            try:
                entry = read(item)
            except InvalidInputError:  # read again, naming where (not made for every entry)
                entry = read(item, where=f"{name}[{position}]")
        except InvalidInputError as exc:
            raise CorruptIndexError(path, str(exc)) from exc
        if entry.id in seen:
            raise CorruptIndexError(path, f"{name}[{position}]: duplicate id {entry.id}")
        seen.add(entry.id)
        entries.append(entry)
    return entries


def _loads(raw: bytes) -> Any:
    """orjson first (a fifth of the time at 100,000 entries); what it refuses and the standard
    library reads (NaN, integers past 64 bits, a hand-edited file) or rejects with a line
    number goes to the standard library, so a file reads as it always did."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return json.loads(raw)


def save_index(
    path: Path, snapshot: L3Snapshot, now: datetime, stored: Stored | None = None
) -> list[int]:
    """Write durably; the previous good file becomes index.json.bak. Entries keep their
    order (insertion order), which resolve uses to tell conversation neighbours apart.
    Returns where each L3 entry lies in the new file (files.entry_texts.reference).

    `stored` is each entry already as its text or a reference to its bytes in the file it
    was read from, in the same order: the engine keeps them between saves (`EntryTexts`),
    so a snapshot serializes only what changed (serializing every entry was most of a
    save: 0.3 s at 10,000 entries, 5 s at 100,000)."""
    if stored is None:
        stored = Stored(snapshot.entries, [entry_json(e) for e in snapshot.entries], None, 0)
    head = {
        "format": FORMAT,
        "log_seq": snapshot.log_seq,
        "last_event_id": snapshot.last_event_id,
        "saved_at": format_time(now),
        "stats": snapshot.stats,
        "l2_written": snapshot.l2_written,
        "l2": [e.to_dict() for e in snapshot.l2 or []],
    }
    opening = json.dumps(head, ensure_ascii=False, separators=(",", ":"))[:-1]
    _keep_v1(path)
    new: list[int] = []
    atomic_write_chunks(path, _index_chunks(opening, stored, new), backup=True)
    return new


def _keep_v1(path: Path) -> None:
    """Before the first checkpoint replaces a `mnemod.l3/1` file, keep it as
    index.json.l3-1 (a downgrade, or a person, can still read it)."""
    kept = path.with_name(path.name + ".l3-1")
    if kept.exists() or not path.exists():
        return
    with path.open("rb") as handle:
        start = handle.read(200)
    if b'"format":"mnemod.l3/1"' in start.replace(b" ", b""):
        os.link(path, kept)


def _index_chunks(opening: str, stored: Stored, new: list[int]) -> Iterator[bytes]:
    """The file in pieces of about a megabyte (`Stored.chunks`). Joined and encoded whole,
    a 10,000-entry index is three C calls of 5-15 ms each that hold the GIL; the daemon
    writes snapshots on a thread beside the one answering requests, which would wait that
    long."""
    first = f'{opening},"entries":['.encode()
    yield first
    yield from stored.chunks(len(first), new)
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

    def job(self, snapshot: L3Snapshot, now: datetime, stored: Stored) -> Callable[[], bool]:
        """The write of `snapshot` (see `save_index`), to run here or on another thread; it
        returns False when a later snapshot was written first. Once written, `stored`
        holds the new file and where each entry lies in it (`Stored.written`)."""
        self._taken += 1
        taken = self._taken

        def write() -> bool:
            try:
                with self._lock:
                    if taken < self._written:
                        return False
                    rows = self._listing_rows(stored)
                    records = self._cache_records(stored)
                    new = save_index(self.path, snapshot, now, stored)
                    self._written = taken
                    seen = self.path.stat()
                    self._write_listing(snapshot, now, seen, rows, new)
                    if stored.source is not None and not stored.source.unchanged():
                        records = None  # the checkpoint serialized the entries instead
                    self._write_cache(snapshot, now, seen, records, new)
                    source = Source.open(self.path, seen)
                    stored.written = None if source is None else (source, new)
                    return True
            finally:
                stored.release()

        return write

    def _listing_rows(self, stored: Stored) -> list[Row] | None:
        """The listing's rows of the snapshot's entries, in its order: a changed entry's
        from its text, an unchanged one's from the listing on disk of the checkpoint its
        reference points into (read again each time: kept in memory, the rows of 100,000
        entries would hold some 25 MB for a write every few minutes), else from its bytes
        there.
        None when they cannot be told (the file referred to changed in place)."""
        source = stored.source
        if source is not None and not source.unchanged():
            return None
        known: dict[Any, Row] = {}  # by reference: a text is no key
        if source is not None:
            known = self._rows_on_disk(source)
        pieces = stored.pieces
        rows: list[Row | None] = list(map(known.get, pieces))
        try:
            for at in [at for at, row in enumerate(rows) if row is None]:
                piece = pieces[at]
                if isinstance(piece, int):
                    assert source is not None, "a reference without its file"
                    rows[at] = row_of(orjson.loads(source.read(*span(piece))))
                else:
                    rows[at] = row_of(orjson.loads(piece))
        except (OSError, ValueError, KeyError, TypeError):
            log.warning("listing.rows_unknown", path=str(self.path), exc_info=True)
            return None
        return cast(list[Row], rows)  # none left None

    def _rows_on_disk(self, source: Source) -> dict[int, Row]:
        """The rows of the listing on disk, when it and the checkpoint at `path` are of the
        file `source`."""
        named = self._named_on_disk(source)
        found_listing = None if named is None else read_listing(listing_path(self.path), named)
        return {} if found_listing is None else found_listing.rows()

    def _named_on_disk(self, source: Source) -> dict[str, Any] | None:
        """The identity (files.listing_file.identity) of the checkpoint at `path`, when it
        is the file `source`: what its derived files on disk must name to be of it."""
        found = read_head_stat(self.path)
        if found is None:
            return None
        head, seen = found
        if file_identity(seen) != source.seen:
            return None
        return identity(head.log_seq, head.last_event_id, head.saved_at, seen)

    def _write_listing(
        self,
        snapshot: L3Snapshot,
        now: datetime,
        seen: os.stat_result,
        rows: list[Row] | None,
        refs: list[int],
    ) -> None:
        """The listing of the checkpoint just written (files.listing_file). Without rows,
        or when it cannot be written, the file left is of an older checkpoint, which its
        readers tell."""
        if rows is None:
            return
        named = identity(snapshot.log_seq, snapshot.last_event_id, format_time(now), seen)
        try:
            save_listing(listing_path(self.path), named, rows, refs)
        except (OSError, TypeError):  # TypeError: a text orjson refuses (never made so)
            log.warning("listing.not_written", path=str(self.path), exc_info=True)

    def _cache_records(self, stored: Stored) -> list[Any] | None:
        """The entries cache's records of the snapshot's entries, in its order, from the
        bytes the checkpoint is written from (files.entries_cache): a changed entry's from
        its text, an unchanged one's from the cache on disk of the checkpoint its reference
        points into, else from its bytes there. None when they cannot be told."""
        source = stored.source
        if source is not None and not source.unchanged():
            return None
        known: dict[int, Any] = {}
        if source is not None:
            known = self._cache_on_disk(source)
        records: list[Any] = []
        try:
            for piece in stored.pieces:
                if isinstance(piece, int):
                    record = known.get(piece)
                    if record is None:
                        assert source is not None, "a reference without its file"
                        record = record_bytes(orjson.loads(source.read(*span(piece))))
                else:
                    record = record_bytes(orjson.loads(piece))
                records.append(record)
        except (OSError, ValueError, KeyError, TypeError):
            log.warning("entries_cache.records_unknown", path=str(self.path), exc_info=True)
            return None
        return records

    def _cache_on_disk(self, source: Source) -> dict[int, Any]:
        """The records of the cache on disk by reference, when it and the checkpoint at
        `path` are of the file `source`."""
        named = self._named_on_disk(source)
        cached = None if named is None else read_cache(cache_path(self.path), named)
        return {} if cached is None else cached.by_ref()

    def _write_cache(
        self,
        snapshot: L3Snapshot,
        now: datetime,
        seen: os.stat_result,
        records: list[Any] | None,
        refs: list[int],
    ) -> None:
        """The entries cache of the checkpoint just written; without records, or when it
        cannot be written, the cache of the older checkpoint is removed (its readers would
        tell it is not of this one, after reading it)."""
        where = cache_path(self.path)
        try:
            if records is None:
                where.unlink(missing_ok=True)
                return
            named = identity(snapshot.log_seq, snapshot.last_event_id, format_time(now), seen)
            save_cache(where, named, records, refs)
        except OSError:
            log.warning("entries_cache.not_written", path=str(self.path), exc_info=True)
