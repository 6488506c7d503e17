"""Each L3 entry's JSON as the next checkpoint writes it, kept between checkpoints at a few
bytes an entry.

An entry unchanged since the checkpoint it was read from (or last written to) is a
reference to its bytes in that file (`Source`), read back when the next checkpoint is
written; only an entry changed since is held as its text, serialized ahead of the save in
slices (`EntryTexts.warm`). Holding every entry's text took about as much memory as all
the rest of the entry, and serializing every entry at a save 5 s at 100,000 entries.

A reference is `start << 32 | length`: where the entry's object starts in the file and how
many bytes it takes. The file is only ever replaced, never written in place, by mnemod; the
descriptor keeps the file it was opened on readable after that. A file changed in place
all the same (its size or time differ from when it was read) is never copied from: the
snapshot's entries are serialized instead.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import compress, repeat
from operator import attrgetter, not_
from pathlib import Path

import orjson
import structlog

from mnemod.domain.model import Entry

log = structlog.get_logger("mnemod.l3")
_SHIFT = 32
_MASK = (1 << _SHIFT) - 1
CHUNK_BYTES = 1 << 20  # a write and a read of the old file at a time
_ID = attrgetter("id")


def entry_json(entry: Entry) -> str:
    """One entry exactly as index.json holds it (compact, non-ASCII kept): the same text as
    `json.dumps(..., ensure_ascii=False, separators=(",", ":"))` in a seventh of the time."""
    return orjson.dumps(entry.to_dict()).decode()


def reference(start: int, length: int) -> int:
    return start << _SHIFT | length


def span(ref: int) -> tuple[int, int]:
    """(start, length) of a reference: where a text lies in its file."""
    return ref >> _SHIFT, ref & _MASK


class SourceChangedError(OSError):
    """The checkpoint file references point into was changed in place."""


class Source:
    """An open checkpoint file that references point into, shared by the texts and the
    snapshots being written from them, and closed when the last lets go."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._seen = file_identity(os.fstat(fd))
        self._users = 1
        self._lock = threading.Lock()

    @classmethod
    def open(cls, path: Path, expected: os.stat_result) -> Source | None:
        """The file at `path`, if it is still the one `expected` describes."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
        source = cls(fd)
        if source._seen != file_identity(expected):
            source.release()
            return None
        return source

    def acquire(self) -> Source:
        with self._lock:
            self._users += 1
        return self

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            last = self._users == 0
        if last:
            os.close(self.fd)

    def unchanged(self) -> bool:
        return file_identity(os.fstat(self.fd)) == self._seen

    @property
    def seen(self) -> tuple[int, int, int, int]:
        """The file as opened (device, inode, size, time)."""
        return self._seen

    def read(self, start: int, length: int) -> bytes:
        data = os.pread(self.fd, length, start)
        if len(data) != length:
            raise SourceChangedError(f"checkpoint shorter than its entries ({start}+{length})")
        return data


def _read(source: Source | None, start: int, length: int) -> bytes:
    assert source is not None, "a reference without its file"
    return source.read(start, length)


def file_identity(stat: os.stat_result) -> tuple[int, int, int, int]:
    """A file's identity as `Source.seen` gives it."""
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns


@dataclass
class Stored:
    """One snapshot's L3 entries as its checkpoint writes them, each a text or a reference
    into `source`. Once written, `written` holds the new file and each entry's reference
    into it (by position), for the texts to take up (`EntryTexts.adopt`)."""

    entries: Sequence[Entry]
    pieces: list[str | int]
    source: Source | None
    generation: int
    written: tuple[Source, list[int]] | None = field(default=None, repr=False)

    def chunks(self, offset: int, new: list[int]) -> Iterator[bytes]:
        """The entries' objects joined by commas, in chunks of about CHUNK_BYTES; `offset`
        is where the first starts in the file being written, and `new` receives each
        entry's reference into it. Runs of entries that lie side by side in the source
        are read in one piece."""
        source, pieces = self.source, self.pieces
        if source is not None and not source.unchanged():
            log.warning("index.source_changed", entries=len(pieces))
            source, pieces = None, [entry_json(e) for e in self.entries]
        parts: list[bytes] = []
        size = 0
        run_start = run_end = -1  # a run of references read as one
        position = offset
        for index, piece in enumerate(pieces):
            lead = b"," if index else b""
            if isinstance(piece, int):
                start, length = span(piece)
                if run_end >= 0 and start == run_end + 1:  # the comma between is in the run
                    run_end = start + length
                else:
                    if run_end >= 0:
                        parts.append(_read(source, run_start, run_end - run_start))
                    parts.append(lead)
                    run_start, run_end = start, start + length
            else:
                if run_end >= 0:
                    parts.append(_read(source, run_start, run_end - run_start))
                    run_end = -1
                data = piece.encode("utf-8")
                length = len(data)
                parts.append(lead + data)
            position += len(lead)
            new.append(reference(position, length))
            position += length
            size += length
            if size >= CHUNK_BYTES:
                if run_end >= 0:
                    parts.append(_read(source, run_start, run_end - run_start))
                    run_end = -1
                yield b"".join(parts)
                parts, size = [], 0
        if run_end >= 0:
            parts.append(_read(source, run_start, run_end - run_start))
        yield b"".join(parts)
        if source is not None and not source.unchanged():
            raise SourceChangedError("checkpoint changed in place while it was copied from")

    def texts(self) -> list[str]:
        """Each entry's JSON text, the references read."""
        source = self.source
        return [p if isinstance(p, str) else _read(source, *span(p)).decode() for p in self.pieces]

    def release(self) -> None:
        """Let go of the file it was copied from."""
        if self.source is not None:
            self.source.release()
            self.source = None

    def discard(self) -> None:
        """Let go of the file it was written to, too (not taken up)."""
        self.release()
        if self.written is not None:
            self.written[0].release()
            self.written = None


class EntryTexts:
    """Each L3 entry's JSON for the next checkpoint, in the order of the owner's entries:
    a reference into `source` for an entry as that file holds it, its text once serialized,
    or waiting to be. The owner tells it what happens to its entries: `added` (at the end,
    or in place for an id it holds), `removed`, and `forget` on every other change.

    What waits (entries no checkpoint holds as they are: read from a file in another
    layout, or changed since) is serialized ahead of the save in slices (`warm`). If the
    order ever differs from the owner's, `of` rebuilds it from the owner's entries and says
    so (`resynced`)."""

    def __init__(
        self,
        loaded: Iterable[Entry] = (),
        source: Source | None = None,
        refs: Mapping[str, int] | None = None,
    ) -> None:
        known = (refs or {}) if source is not None else {}
        ids = list(map(_ID, loaded))
        # in C calls (a loop over 100,000 entries was a tenth of what an open does after the
        # read); a reference is never 0 (the file's head comes first)
        pieces = list(map(known.get, ids, repeat("")))
        self._texts: dict[str, str | int] = dict(zip(ids, pieces, strict=True))
        # to serialize: those without a reference
        self._waiting: dict[str, None] = dict.fromkeys(compress(ids, map(not_, pieces)))
        self.source = source if known else None
        if source is not None and not known:
            source.release()
        self._generation = 0  # snapshots taken
        self._adopted = -1  # the generation of the file the references point into
        self._touched: dict[str, int] = {}  # id -> the generation it last changed in
        self.resynced = 0

    @property
    def cold(self) -> bool:
        """Entries wait for `warm`."""
        return bool(self._waiting)

    @property
    def referenced(self) -> int:
        """Entries held as a reference into the source file."""
        return sum(1 for value in self._texts.values() if type(value) is int)

    def added(self, entry_id: str) -> None:
        self._texts.setdefault(entry_id, "")
        self._changed(entry_id)

    def removed(self, entry_id: str) -> None:
        self._texts.pop(entry_id, None)
        self._waiting.pop(entry_id, None)

    def forget(self, entry_id: str) -> None:
        if entry_id in self._texts:
            self._changed(entry_id)

    def _changed(self, entry_id: str) -> None:
        self._waiting[entry_id] = None
        self._touched[entry_id] = self._generation

    def warm(self, seconds: float, current: Mapping[str, Entry]) -> None:
        """Serialize waiting entries, as `current` holds them now, for about `seconds`."""
        deadline = time.monotonic() + seconds
        texts, waiting = self._texts, self._waiting
        while waiting:
            entry_id, _ = waiting.popitem()  # the newest: O(1), where the oldest is not
            entry = current.get(entry_id)
            if entry is not None and entry_id in texts:
                texts[entry_id] = entry_json(entry)
            if time.monotonic() >= deadline:
                return

    def of(self, current: Mapping[str, Entry]) -> Stored:
        """All `current` entries, in their order, for a snapshot (which holds the source
        until it is released)."""
        self.warm(math.inf, current)
        if len(self._texts) != len(current) or list(self._texts) != list(current):
            self.resynced += 1
            log.warning("index.texts_resynced", held=len(current), kept=len(self._texts))
            self._texts = {entry_id: entry_json(e) for entry_id, e in current.items()}
            self._drop_source()
        source = self.source.acquire() if self.source is not None else None
        pieces = list(self._texts.values())
        stored = Stored(list(current.values()), pieces, source, self._generation)
        self._generation += 1
        return stored

    def adopt(self, stored: Stored) -> None:
        """The checkpoint of `stored` is written: its entries not changed since become
        references into that file, which becomes the source."""
        if stored.written is None or stored.generation < self._adopted:
            stored.discard()
            return
        new, refs = stored.written
        stored.written = None
        touched, texts = self._touched, self._texts
        for entry, ref in zip(stored.entries, refs, strict=True):
            entry_id = entry.id
            if entry_id in texts and touched.get(entry_id, -1) < stored.generation + 1:
                texts[entry_id] = ref
                self._waiting.pop(entry_id, None)
        self._touched = {i: g for i, g in touched.items() if g > stored.generation}
        self._drop_source()
        self.source, self._adopted = new, stored.generation

    def _drop_source(self) -> None:
        if self.source is not None:
            self.source.release()
            self.source = None

    def close(self) -> None:
        """Let go of the source: its references wait to be serialized again."""
        if self.source is None:
            return
        self._drop_source()
        for entry_id, text in self._texts.items():
            if type(text) is int:
                self._texts[entry_id] = ""
                self._waiting[entry_id] = None
