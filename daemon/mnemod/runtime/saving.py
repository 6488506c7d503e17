"""When one namespace's changes reach the disk, and in what order.

The journal is flushed first, then index.json is written: archived copies are durable
before their entries leave the index, and the index records the journal's length, which a
restart cuts the journal back to. With autosave (the library) a change is saved at once,
accesses alone (soft state: every resolve records some) at most every ACCESS_SAVE_SECONDS,
and `batch` gathers many changes into one save. The daemon turns autosave off: its writer
takes snapshots with `prepare_save` and writes them on another thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import structlog

from mnemod.clock import Clock
from mnemod.domain.model import Entry
from mnemod.errors import MnemodError
from mnemod.files.journal import Journal
from mnemod.files.l3_store import EntryTexts, IndexWriter, L3Snapshot
from mnemod.runtime.paths import NamespacePaths

log = structlog.get_logger("mnemod.engine")
ACCESS_SAVE_SECONDS = 30.0  # accesses are soft state: losing 30 s of them loses no memory


class Saving:
    def __init__(
        self,
        paths: NamespacePaths,
        journal: Journal,
        texts: EntryTexts,
        entries: Mapping[str, Entry],
        clock: Clock,
        take: Callable[[], L3Snapshot],
        *,
        autosave: bool,
        readonly: bool,
    ) -> None:
        """`take` is the engine's snapshot of what it holds now, `entries` its L3 entries and
        `texts` their JSON."""
        self.paths = paths
        self.journal = journal
        self.texts = texts
        self.entries = entries
        self.clock = clock
        self.take = take
        self.readonly = readonly
        self.autosave = autosave and not readonly
        self.dirty = False
        self.soft_dirty = False  # only accesses changed since the last save
        self.last_save = time.monotonic()
        self._index = IndexWriter(paths.index)
        self._depth = 0

    def trim_journal(self, stats: dict[str, Any]) -> None:
        """Records appended after the last snapshot describe changes the snapshot does not
        hold; after a crash those changes are applied again from the event stream, so the
        records are cut back to the snapshot's length rather than written twice."""
        recorded = stats.get("journal")
        if isinstance(recorded, dict):
            for name, cut in self.journal.truncate_to(recorded).items():
                log.warning("journal.truncated", file=name, bytes=cut, reason="after the snapshot")

    # ---- what changed ------------------------------------------------------------------
    def changed(self) -> None:
        """A change to keep: saved at once with autosave, outside a batch."""
        self.dirty = True
        self.maybe_save()

    def accessed(self) -> None:
        """Only access fields changed (see ACCESS_SAVE_SECONDS)."""
        self.soft_dirty = True
        self.maybe_save()

    def access_save_due(self) -> bool:
        return self.soft_dirty and time.monotonic() - self.last_save >= ACCESS_SAVE_SECONDS

    def maybe_save(self) -> None:
        if not self.autosave or self._depth:
            return
        if self.dirty or self.journal.pending or self.access_save_due():
            self.save()

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Changes inside are saved once at the end, by the usual autosave rules."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
        self.maybe_save()

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Defer saving until the outermost batch ends (one fsync for many changes); unlike
        `deferred`, the end of a batch also saves accesses at once."""
        with self.deferred():
            yield
        if self._depth == 0 and self.autosave:
            self.save()

    # ---- to the disk ---------------------------------------------------------------------
    def save(self, now: datetime | None = None) -> bool:
        """Journal first, then the index: archived copies are durable before entries leave."""
        write = self.prepare_save(now)
        if write is None:
            return False
        try:
            write()
        except BaseException:
            self.dirty = True  # not on disk: the next save writes it
            raise
        return True

    def prepare_save(self, now: datetime | None = None) -> Callable[[], bool] | None:
        """Flush the journal and take a snapshot now; return the index write, which may run
        on another thread while the engine goes on (the daemon's writer does). None when
        nothing changed. If the write fails, the caller sets `dirty` again."""
        if not (self.dirty or self.soft_dirty or self.journal.pending):
            return None
        if self.readonly:
            raise MnemodError(f"{self.paths.root}: opened read-only; changes are not saved")
        if self.journal.pending:
            self.journal.flush()
            self.dirty = True  # the index records the journal's length (see trim_journal)
        snapshot = self.take()
        texts = self.texts.of(self.entries)
        write = self._index.job(snapshot, now or self.clock.now(), texts)
        self.dirty = self.soft_dirty = False
        self.last_save = time.monotonic()
        return write
