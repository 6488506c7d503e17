"""When one namespace's changes become durable, and how the derived files follow.

A commit turns every change since the last one into one change-log record (the entries as
they are now, removals, accesses, the history and archive records, the events applied),
appended with one fsync: that is the moment a change is durable and its events may be
acknowledged. Then the derived files are brought up to date: history.jsonl and
archive.jsonl (lines tagged with the record's seq, so none is written twice), the L2 files
of the types that changed (store.l2_layer), each retried until it is written; a failure
there loses nothing and stops nothing, it is reported (`waiting`). From time to time the
whole state is written as a checkpoint (index.json), after which the log's older segments
go.

With autosave (the library) a change is committed at once, accesses alone (soft state:
every resolve records some) at most every ACCESS_SAVE_SECONDS, and `batch` gathers many
changes into one commit. The daemon turns autosave off and commits once per batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog

from mnemod.clock import Clock, format_time
from mnemod.domain.model import Entry
from mnemod.errors import MnemodError
from mnemod.files.change_log import ChangeLog, encode_record
from mnemod.files.entry_texts import EntryTexts, Stored
from mnemod.files.journal import Journal, JournalFiles
from mnemod.files.l3_store import IndexWriter, L3Snapshot
from mnemod.store.l2_layer import Edit, L2Files
from mnemod.store.paths import NamespacePaths

log = structlog.get_logger("mnemod.commits")
ACCESS_SAVE_SECONDS = 30.0  # accesses are soft state: losing 30 s of them loses no memory
CHECKPOINT_BYTES = 16 * 1024 * 1024  # of log since the last checkpoint
CHECKPOINT_SECONDS = 600.0
RETRY_SECONDS = 1.0
RETRY_CAP_SECONDS = 60.0


@dataclass
class State:
    """What a namespace holds, shared by the engine (which changes it) and the commits
    (which record it)."""

    entries: dict[str, Entry] = field(default_factory=dict)  # L3, in insertion order
    l2: dict[str, Entry] = field(default_factory=dict)
    last_event_id: str | None = None
    journal: Journal = field(default_factory=Journal)


@dataclass
class _Queued:
    """A committed record's lines not yet in the journal files."""

    seq: int
    history: list[dict[str, Any]]
    archived: list[dict[str, Any]]


class Commits:
    def __init__(
        self,
        paths: NamespacePaths,
        state: State,
        texts: EntryTexts,
        clock: Clock,
        changelog: ChangeLog,
        l2: L2Files,
        *,
        checkpoint_seq: int,
        autosave: bool,
        readonly: bool,
    ) -> None:
        self.paths = paths
        self.state = state
        self.texts = texts
        self.clock = clock
        self.log = changelog
        self.l2 = l2
        self.readonly = readonly
        self.autosave = autosave and not readonly
        self.journal_files = JournalFiles(paths.history, paths.archive, readonly=readonly)
        self.index = IndexWriter(paths.index)
        self.pending: dict[str, str] = {}  # entry id -> strongest op since the last commit
        self.events: list[str] = []  # event ids applied since the last commit
        self.soft_only = True  # pending holds accesses only
        self.last_commit = self.clock.monotonic()
        self._l2_types: dict[str, str] = {e.id: e.type for e in state.l2.values()}
        self._queue: list[_Queued] = []
        self._unappended: list[dict[str, Any]] = []  # records a failed append left
        self.failures = 0  # failed appends in a row
        self._retry_at = 0.0
        self.checkpoint_seq = checkpoint_seq  # held by index.json
        self._bak_seq = checkpoint_seq  # held by index.json.bak (at most)
        self._checkpoint_at = self.clock.monotonic()
        self._stored: list[tuple[int, Stored]] = []  # snapshots being written, with their seq
        self._log_at_checkpoint = changelog.size if not readonly else 0
        self._depth = 0
        self.take_edit: Callable[[Edit], None] | None = None  # the engine's, for edits
        # A leader's: puts records into the namespace before they are appended here
        # (runtime.feed_publisher); what it raises leaves them for the next try.
        self.publish: Callable[[list[bytes]], None] | None = None

    def close(self) -> None:
        """Close the files held open for appends (the log's newest segment, the journals)."""
        self.log.close()
        self.journal_files.close()

    # ---- what changed ------------------------------------------------------------------
    def note(self, entry_id: str, op: str) -> None:
        """An entry changed (op `access` for accesses alone)."""
        if op != "access":
            self.pending[entry_id] = op
            self.soft_only = False
        else:
            self.pending.setdefault(entry_id, op)

    def applied(self, event_id: str) -> None:
        self.events.append(event_id)
        self.soft_only = False

    def changed(self) -> None:
        """A change to keep: committed at once with autosave, outside a batch."""
        self.soft_only = False
        self.maybe_commit()

    def accessed(self) -> None:
        self.maybe_commit()

    @property
    def dirty(self) -> bool:
        """Something waits to be committed (accesses alone included)."""
        return bool(self.pending or self.events or self.state.journal.pending or self._unappended)

    @property
    def unappended(self) -> bool:
        """A record is made and not yet durable (its append or its publish failed)."""
        return bool(self._unappended)

    @property
    def hard(self) -> bool:
        """Something other than accesses waits to be committed."""
        return bool(self.events or self._unappended or not self.soft_only) and self.dirty

    def access_commit_due(self) -> bool:
        elapsed = self.clock.monotonic() - self.last_commit
        return bool(self.pending) and elapsed >= ACCESS_SAVE_SECONDS

    def maybe_commit(self) -> None:
        if not self.autosave or self._depth:
            return
        if self.hard or self.access_commit_due():
            self.commit()

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Changes inside are committed once at the end, by the usual autosave rules."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1
        self.maybe_commit()

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Defer until the outermost batch ends (one fsync for many changes); unlike
        `deferred`, the end of a batch also commits accesses at once."""
        with self.deferred():
            yield
        if self._depth == 0 and self.autosave and self.dirty:
            self.commit()

    # ---- the commit point ----------------------------------------------------------------
    @property
    def failing(self) -> bool:
        """The last append failed (a full or read-only disk): its record waits."""
        return self.failures > 0

    @property
    def retry_in(self) -> float:
        """Seconds until a failed append is tried again (0 when none failed)."""
        return max(0.0, self._retry_at - self.clock.monotonic()) if self.failures else 0.0

    def commit(self, now: datetime | None = None) -> int:
        """Make every change since the last commit durable; returns the records appended
        (0 when nothing changed). A failed append (OSError) keeps its record for the next
        try and goes up: nothing is acknowledged until it is durable."""
        if self.readonly:
            if self.dirty:
                raise MnemodError(f"{self.paths.root}: opened read-only; changes are not saved")
            return 0
        if self.pending or self.events or self.state.journal.pending:
            self._unappended.append(self._record(now or self.clock.now()))
        if not self._unappended:
            return 0
        records = self._unappended
        lines = [encode_record(r) for r in records]
        if self.publish is not None:
            self.publish(lines)
        try:
            self.log.append_lines(lines, [r["seq"] for r in records])
        except OSError:
            self.failures += 1
            delay = RETRY_SECONDS * 2 ** min(self.failures - 1, 16)
            self._retry_at = self.clock.monotonic() + min(RETRY_CAP_SECONDS, delay)
            raise
        self._unappended = []
        self.failures = 0
        self.last_commit = self.clock.monotonic()
        for record in records:
            self._queue.append(_Queued(record["seq"], record["history"], record["archive"]))
        self.derive()
        return len(records)

    def _record(self, now: datetime) -> dict[str, Any]:
        state = self.state
        ops: list[dict[str, Any]] = []
        hard_types: set[str] = set()
        soft_types: set[str] = set()
        for entry_id, op in self.pending.items():
            entry, layer = state.entries.get(entry_id), "l3"
            if entry is None:
                entry, layer = state.l2.get(entry_id), "l2"
            old_type = self._l2_types.pop(entry_id, None)
            if entry is None:
                ops.append({"op": "del", "id": entry_id})
                if old_type is not None:
                    hard_types.add(old_type)
                continue
            if layer == "l2":
                self._l2_types[entry_id] = entry.type
            if op == "access":
                ops.append(_access_op(entry, layer))
                if layer == "l2":
                    soft_types.add(entry.type)
            else:
                ops.append({"op": "put", "layer": layer, "entry": entry.to_dict()})
                if layer == "l2":
                    hard_types.add(entry.type)
                if old_type is not None:
                    hard_types.add(old_type)
        history, archived = state.journal.take()
        seq = self.log.last_seq + len(self._unappended) + 1
        record: dict[str, Any] = {
            "seq": seq,
            "at": format_time(now),
            "last_event_id": state.last_event_id,
            "events": self.events,
            "ops": ops,
            "history": history,
            "archive": archived,
            "l2_written": dict(self.l2.written),
        }
        self.pending = {}
        self.events = []
        self.soft_only = True
        self.l2.mark(hard_types)
        self.l2.mark(soft_types - hard_types, accesses_only=True)
        return record

    # ---- derived files ---------------------------------------------------------------------
    def derive(self, everything: bool = False) -> None:
        """Bring the journal files and the L2 files up to date with what is committed, as
        far as they can be now (see `waiting`); `everything` writes accesses-only L2
        changes too (at close)."""
        if self.readonly or self._unappended:
            return  # never ahead of the log
        self._write_journals()
        took_edit = False
        for type_ in self.l2.due(everything):
            path = self.l2.folder.path_for(type_)
            if path.exists() and not self.l2.is_own(path):
                # a person's edit not read yet: taken first, written with the next commit
                edit = self.l2.read_edit(path, self.state.l2)
                if edit is not None and self.take_edit is not None:
                    self.take_edit(edit)
                    took_edit = True
                    continue
                if type_ in self.l2.broken:
                    continue
            entries = [e for e in self.state.l2.values() if e.type == type_]
            self.l2.write(type_, entries)
        if took_edit and self.autosave and not self._depth:
            self.commit()

    def _write_journals(self) -> None:
        while self._queue:
            queued = self._queue[0]
            try:
                self.journal_files.write(queued.seq, queued.history, queued.archived)
            except OSError as exc:
                log.error("journal.write_failed", error=str(exc)[:300], seq=queued.seq)
                return
            self._queue.pop(0)

    def adopt(self, records: list[tuple[dict[str, Any], bytes]]) -> None:
        """Records committed by the namespace's leader, appended as they are (a follower's
        copy): their journal lines and L2 files follow as for this daemon's own. The caller
        applies them to the state (store.replica), then derives."""
        self.log.append_lines([line for _, line in records])
        for record, _ in records:
            self._queue.append(
                _Queued(record["seq"], record.get("history") or [], record.get("archive") or [])
            )
            for op in record.get("ops") or []:
                self._adopt_op(op)

    def _adopt_op(self, op: dict[str, Any]) -> None:
        """Which L2 files a record's op changes, as `_record` marks them for our own."""
        entry_id = op.get("id") or op.get("entry", {}).get("id")
        if op.get("op") == "acc":
            type_ = self._l2_types.get(entry_id)
            if type_ is not None:
                self.l2.mark([type_], accesses_only=True)
            return
        old_type = self._l2_types.pop(entry_id, None)
        if old_type is not None:
            self.l2.mark([old_type])
        if op.get("op") == "put" and op.get("layer") == "l2":
            type_ = op["entry"]["type"]
            self._l2_types[entry_id] = type_
            self.l2.mark([type_])

    def queue_journal(self, seq: int, history: list[Any], archived: list[Any]) -> None:
        """A replayed record whose lines may be missing from the journal files."""
        if seq > self.journal_files.through:
            self._queue.append(_Queued(seq, history, archived))

    @property
    def waiting(self) -> dict[str, str]:
        """Derived files behind the log, with why: `l2/<type>.md` and the journals."""
        found = {f"l2/{t}.md": why for t, why in self.l2.waiting.items()}
        if self._queue:
            found["history.jsonl/archive.jsonl"] = f"{len(self._queue)} commits to append"
        if self._unappended:
            found["log"] = f"{len(self._unappended)} commits not yet durable"
        return found

    # ---- checkpoints -----------------------------------------------------------------------
    def checkpoint_due(self) -> bool:
        if self.readonly or self.log.last_seq <= self.checkpoint_seq:
            return False
        grown = self.log.size - self._log_at_checkpoint
        return (
            grown >= CHECKPOINT_BYTES
            or self.clock.monotonic() - self._checkpoint_at >= CHECKPOINT_SECONDS
        )

    def prepare_checkpoint(
        self, stats: Mapping[str, Any], force: bool = False
    ) -> Callable[[], int] | None:
        """The checkpoint of what is committed now, to write here or on another thread; it
        returns its seq, to hand to `checkpoint_written`. None when nothing is new (unless
        `force`), or changes are not committed yet (a checkpoint holds only committed
        state)."""
        if self.readonly or self.dirty:
            return None
        if not force and self.log.last_seq <= self.checkpoint_seq:
            return None
        state = self.state
        seq = self.log.last_seq
        snapshot = L3Snapshot(
            list(state.entries.values()),
            state.last_event_id,
            dict(stats),
            log_seq=seq,
            l2=list(state.l2.values()),
            l2_written=dict(self.l2.written),
        )
        stored = self.texts.of(state.entries)
        write = self.index.job(snapshot, self.clock.now(), stored)
        self._stored.append((seq, stored))
        self._checkpoint_at = self.clock.monotonic()
        self._log_at_checkpoint = self.log.size

        def run() -> int:
            write()
            return seq

        return run

    def checkpoint_written(self, seq: int) -> None:
        """The checkpoint of `seq` is durable: the log before what index.json.bak and the
        journal files still need can go."""
        done = [(s, stored) for s, stored in self._stored if s <= seq]
        self._stored = [(s, stored) for s, stored in self._stored if s > seq]
        for position, (taken, stored) in enumerate(done):
            if position == len(done) - 1 and taken == seq and seq >= self.checkpoint_seq:
                self.texts.adopt(stored)  # unchanged entries now point into the new file
            else:
                stored.discard()
        if seq < self.checkpoint_seq:
            return
        self._bak_seq, self.checkpoint_seq = self.checkpoint_seq, seq
        self.journal_files.sync()  # appended without fsync: durable before their records go
        keep_from = min(self._bak_seq, self.journal_files.through) + 1
        removed = self.log.prune_before(keep_from)
        log.info("checkpoint.written", seq=seq, entries=len(self.state.entries), pruned=removed)

    def checkpoint(self, stats: Mapping[str, Any], force: bool = False) -> bool:
        """Commit, then write a checkpoint at once (close, shutdown; `force`: even when
        the log has nothing new, as after a migration)."""
        self.commit()
        write = self.prepare_checkpoint(stats, force)
        if write is None:
            return False
        self.checkpoint_written(write())
        return True


def _access_op(entry: Entry, layer: str) -> dict[str, Any]:
    return {
        "op": "acc",
        "layer": layer,
        "id": entry.id,
        "access_count": entry.access_count,
        "selected_count": entry.selected_count,
        "last_accessed_at": format_time(entry.last_accessed_at),
        "expires_at": format_time(entry.expires_at) if entry.expires_at else None,
    }
