"""The memory engine: one namespace's L1, L2 and L3 in memory, changed through one object.

The library (`mnemod.open`) and the daemon share it. Every change goes through these methods,
which validate, apply the domain rules, note the change for the next commit and, with
`autosave`, commit it before returning (store.commits says when and how: a change-log
record, then the derived files). The daemon turns autosave off and commits once per batch.
Opening is recovery: the checkpoint, the log replayed after it, the L2 files compared with
what is committed (store.recovery, store.l2_layer).
"""

from __future__ import annotations

import time
from collections import Counter
from contextlib import AbstractContextManager
from datetime import datetime
from pathlib import Path
from typing import Any

import structlog

from mnemod.clock import Clock
from mnemod.config import Config
from mnemod.domain.gc import GcReport
from mnemod.domain.model import Entry
from mnemod.domain.resolve import ResolveResult
from mnemod.domain.similar_pairs import KeywordIndex
from mnemod.domain.validation import NewEntry
from mnemod.errors import InvalidInputError, NotFoundError
from mnemod.files.atomic import allow_group
from mnemod.files.l1_files import L1Item, L1Problem, L1Registry
from mnemod.files.lock import NamespaceLock
from mnemod.store import changes
from mnemod.store.bulk import restore_entries
from mnemod.store.gc_run import run_gc
from mnemod.store.heap import built_whole, collector_paused
from mnemod.store.l2_layer import Edit
from mnemod.store.lookup import Lookup
from mnemod.store.paths import NamespacePaths
from mnemod.store.recall import Recall
from mnemod.store.recovery import open_namespace
from mnemod.store.warming import Indexes
from mnemod.tokens import TokenCounter, lazy_token_counter

log = structlog.get_logger("mnemod.engine")


class Engine:
    """One namespace. Not thread-safe: the daemon's single writer thread owns it."""

    def __init__(
        self,
        paths: NamespacePaths,
        config: Config,
        clock: Clock,
        *,
        l1_dir: Any = None,
        actor: str = "api",
        autosave: bool = True,
        readonly: bool = False,
        replica: bool = False,
    ) -> None:
        """`replica`: a follower's copy (store.replica), which takes no person's L2 edits:
        they are made where the namespace is led, and its L2 files are rewritten."""
        self.paths = paths
        self.config = config
        self.clock = clock
        self.actor = actor
        self.readonly = readonly
        self.counter: TokenCounter = lazy_token_counter(config.tokens.encoding)
        allow_group(config.daemon.group_access)  # the modes of the files made from now on
        self._lock = None if readonly else NamespaceLock(paths.lock)
        if self._lock is not None:
            self._lock.acquire()
        # every object made here lives as long as the engine (see store.heap)
        with collector_paused():
            try:
                opened = open_namespace(paths, clock, autosave=autosave, readonly=readonly)
            except BaseException:
                self.close()
                raise
            self.state, self.commits, self.texts = opened.state, opened.commits, opened.texts
            # index.json is not the checkpoint the commits hold (read from its .bak instead)
            self.index_recovered = opened.recovered
            self.entries: dict[str, Entry] = self.state.entries
            self.l2_entries: dict[str, Entry] = self.state.l2
            self.journal = self.state.journal
            self._gc_index: KeywordIndex | None = None
            # kept in step by insert, drop and a change of type: counted at every checkpoint,
            # a loop over every entry took 10-30 ms at 100k
            self._by_type: Counter[str] = Counter(e.type for e in self.entries.values())
            self.l1 = L1Registry(l1_dir, config.limits) if l1_dir is not None else None
            self.l1_problems: list[L1Problem] = self.l1.reload_all() if self.l1 is not None else []
            # the lookups and resolve's view, built when first needed or in `warm`'s slices
            self.indexes = Indexes(self.state, self.counter, self.l1_items)
            self.lookup: Lookup = self.indexes.lookup
            self.set_replica(replica)
            self.changed: dict[str, str] = {}
            self.last_outcome = ""
            for edit in [] if replica else opened.edits:
                self._take_edit(edit, clock.now())
            if not readonly:
                if not replica:  # a copy commits nothing of its own: its records are the leader's
                    if opened.migrated and (paths.index.exists() or self.l2_entries):
                        self.commits.checkpoint(self._stats(), force=True)
                    self.commits.commit()
                self.commits.derive()

    # ---- lifecycle -------------------------------------------------------------------
    def close(self) -> None:
        """Commit, bring every derived file up to date, checkpoint, release the lock."""
        try:
            if not self.readonly and hasattr(self, "commits"):
                self.commits.commit()
                self.commits.derive(everything=True)
                self.commits.checkpoint(self._stats())
        finally:
            if hasattr(self, "commits"):
                self.commits.close()
            if hasattr(self, "texts"):
                self.texts.close()
            if self._lock is not None:
                self._lock.release()

    def abandon(self) -> None:
        """Release the lock without committing: what is not in the log is not this
        namespace's (a leader that lost its lease: its events are applied by the next)."""
        self.commits.close()
        self.texts.close()
        if self._lock is not None:
            self._lock.release()

    def set_replica(self, replica: bool) -> None:
        """A follower's copy takes no L2 edits; a leader's takes them as changes."""
        if replica:
            self.commits.take_edit = None
        else:
            self.commits.take_edit = lambda edit: self._take_edit(edit, self.clock.now())

    def batch(self) -> AbstractContextManager[None]:
        """Changes inside are committed once, at the end (see Commits.batch)."""
        return self.commits.batch()

    def deferred(self) -> AbstractContextManager[None]:
        """Changes inside are committed once at the end, by the autosave rules."""
        return self.commits.deferred()

    def save(self, now: datetime | None = None) -> bool:
        """Commit what changed; True when a record was appended."""
        return self.commits.commit(now) > 0

    def _stats(self) -> dict[str, Any]:
        """The checkpoint's `stats` (files.l3_store.STATS_FIELDS): `mnemod stats` answers
        from them while no record follows the checkpoint (store.reader)."""
        return self.stats()

    def stats(self) -> dict[str, Any]:
        """The namespace's counts: entries (L3) by type, L2 by type, promotable entries and
        the L3 entries' tokens."""
        l3 = self.entries.values()
        return {
            "entries": len(self.entries),
            "by_type": self.counts_by_type(),
            "l2": len(self.l2_entries),
            "l2_by_type": dict(sorted(Counter(e.type for e in self.l2_entries.values()).items())),
            "promotable": sum(1 for e in l3 if e.promotable),
            "tokens": sum(e.tokens for e in l3),
        }

    def checkpoint_job(self) -> Any:
        """The checkpoint of what is committed now (see Commits.prepare_checkpoint)."""
        return self.commits.prepare_checkpoint(self._stats())

    def checkpoint(self, force: bool = False) -> bool:
        return self.commits.checkpoint(self._stats(), force)

    @property
    def committed_seq(self) -> int:
        """The last record of the change log (what the files hold once derived)."""
        return self.commits.log.last_seq

    @property
    def last_event_id(self) -> str | None:
        return self.state.last_event_id

    def mark_applied(self, event_id: str) -> None:
        self.state.last_event_id = event_id
        self.commits.applied(event_id)

    def is_own_l2_write(self, path: Path) -> bool:
        return self.commits.l2.is_own(path)

    @property
    def derived_waiting(self) -> dict[str, str]:
        """Derived files behind the change log, with why (status, doctor)."""
        return self.commits.waiting

    def note_change(self) -> None:
        """A change to keep was made (committed at once with autosave)."""
        self.commits.changed()

    def note_access(self) -> None:
        """Only accesses changed (soft state: see store.commits)."""
        self.commits.accessed()

    def archive(self, entry: Entry, reason: str, now: datetime, by: str) -> None:
        """Keep a whole copy of an entry that leaves or is superseded, with the reason."""
        self.journal.archive(now, entry, reason, by)

    def record(self, now: datetime, op: str, entry_id: str, by: str, **detail: Any) -> None:
        """A history record of a change, committed with it."""
        self.journal.record(now, op, entry_id, by, **detail)

    def touched(self, entry_id: str, op: str) -> None:
        """Note a change for the hot layer, keep resolve's view in step and forget the
        entry's stored JSON. An access never hides a stronger change of the same batch (an
        add, an update)."""
        if op != "access" or entry_id not in self.changed:
            self.changed[entry_id] = op
        self.commits.note(entry_id, op)
        self.texts.forget(entry_id)
        self.indexes.touched(entry_id, op)

    @property
    def recall(self) -> Recall:
        """Resolve's view of every item (built now if it was not: store.warming, the
        collector held off meanwhile, see store.heap.built_whole)."""
        if self.indexes.recall_built:
            return self.indexes.recall
        with built_whole():
            return self.indexes.recall

    @property
    def cold(self) -> bool:
        """Something is still to be built or serialized ahead of use (`warm`)."""
        return self.indexes.cold or self.texts.cold

    def warm(self, seconds: float) -> None:
        """About `seconds` of building what open left for later: the indexes, then each
        entry's JSON for the next checkpoint (the daemon runs this while no request waits)."""
        deadline = time.perf_counter() + seconds
        with collector_paused():  # what it builds is kept (see store.heap)
            if self.indexes.cold:
                self.indexes.warm(seconds)
            if not self.indexes.cold and self.texts.cold:
                self.texts.warm(max(0.0, deadline - time.perf_counter()), self.entries)

    def drain_changes(self) -> dict[str, str]:
        changed, self.changed = self.changed, {}
        return changed

    # ---- reads -------------------------------------------------------------------------
    def resolve_id(self, entry_id: str) -> str:
        return self.lookup.resolve_id(entry_id)

    def find(self, id_or_key: str) -> Entry | None:
        entry_id = self.resolve_id(id_or_key)
        found = self.entries.get(entry_id) or self.l2_entries.get(entry_id)
        if found is None and id_or_key in self.lookup.keys:
            found = self.entries.get(self.lookup.keys[id_or_key])
        if found is None:
            found = next((e for e in self.l2_entries.values() if e.key == id_or_key), None)
        return found

    def get(self, id_or_key: str) -> Entry:
        found = self.find(id_or_key)
        if found is None:
            raise NotFoundError(f"entry {id_or_key!r} in namespace {self.paths.namespace!r}")
        return found

    def layer_of(self, entry: Entry) -> str:
        return "l2" if entry.id in self.l2_entries else "l3"

    def select(self, type_: str | None = None, layer: str | None = None) -> list[Entry]:
        pools = {"l3": self.entries.values(), "l2": self.l2_entries.values()}
        chosen = [pools[layer]] if layer in pools else list(pools.values())
        found = [e for pool in chosen for e in pool if type_ is None or e.type == type_]
        return sorted(found, key=lambda e: (e.created_at, e.id))

    def l1_items(self) -> list[L1Item]:
        return self.l1.items() if self.l1 is not None else []

    def counts_by_type(self) -> dict[str, int]:
        return {kind: n for kind, n in sorted(self._by_type.items()) if n}

    def similar(self, entry: Entry) -> tuple[Entry, float] | None:
        """The same-type L3 entry that is one memory with `entry`, best score first."""
        if not self.indexes.postings_built:  # built now (see `recall`)
            with built_whole():
                self.indexes.postings_ready()
        return self.indexes.postings_ready().similar(entry, self.entries, self.config.dedup)

    # ---- writes ------------------------------------------------------------------------
    def add(self, new: NewEntry, now: datetime | None = None, by: str | None = None) -> Entry:
        """Store a memory; returns the entry that holds it (an existing one after dedup)."""
        return changes.add(self, new, now, by)

    def access(
        self,
        entry_id: str,
        now: datetime | None = None,
        selected: bool = False,
        times: int = 1,
    ) -> Entry:
        """Record a use (`times` uses, the last at `now`): extends the TTL and counts toward
        promotion. `selected` marks resolve selections, which ranking does not count as
        evidence of relevance."""
        return changes.access(self, entry_id, now, selected, times)

    def update(
        self,
        entry_id: str,
        fields: dict[str, Any],
        now: datetime | None = None,
        by: str | None = None,
    ) -> Entry:
        return changes.update(self, entry_id, fields, now, by)

    def remove(self, entry_id: str, now: datetime | None = None, by: str | None = None) -> Entry:
        return changes.remove(self, entry_id, now, by)

    def promote(self, entry_id: str, now: datetime | None = None, by: str | None = None) -> Entry:
        """Move an L3 entry into its type's L2 file; it leaves L3 only once L2 is durable."""
        entry = self.get(entry_id)
        if entry.id in self.l2_entries:
            return entry
        now = now or self.clock.now()
        self.promote_many([entry], now, by or self.actor)
        return entry

    def gc(
        self,
        dry_run: bool = False,
        now: datetime | None = None,
        by: str = "gc",
        expire_only: bool = False,
    ) -> GcReport:
        """Expire, merge, mark promotable, promote (see store.gc_run)."""
        return run_gc(self, now or self.clock.now(), dry_run, by, expire_only)

    def restore(self, entries: list[tuple[str, Entry]], now: datetime | None = None) -> int:
        """Put exported entries back as they were; returns how many (see runtime.bulk)."""
        return restore_entries(self, entries, now or self.clock.now())

    def resolve(
        self,
        prompt: str,
        budget: int | None = None,
        *,
        session: str | None = None,
        seen_once: set[str] | None = None,
        now: datetime | None = None,
        trace: bool = False,
        record_access: bool = True,
    ) -> ResolveResult:
        """Token-budgeted context for `prompt`. Records an access on every selected L2/L3
        entry (as agents use it) and, for `session`, which `once` items were injected."""
        now = now or self.clock.now()
        limit = budget if budget is not None else self.config.resolve.default_budget
        if limit < 1:
            raise InvalidInputError("budget", "must be at least 1 token")
        result = self.recall.resolve(prompt, limit, now, session, seen_once, trace)
        if record_access and not self.readonly:
            self.record_selection(result, now)
        return result

    @property
    def has_once_items(self) -> bool:
        """Whether a session can change what resolve selects (some hot item is `once`)."""
        return self.recall.resolver.has_once_items

    def record_selection(self, result: ResolveResult, now: datetime) -> None:
        """An access on every L2/L3 entry a resolve selected (as agents use it)."""
        self.record_selections({i.id: (1, now) for i in result.items if i.layer != "l1"})

    def record_selections(self, selected: dict[str, tuple[int, datetime]]) -> None:
        """Resolve selections: entry id -> (how many times, the last time). An entry gone
        since (removed, expired) has nothing to record."""
        with self.commits.deferred():
            for entry_id, (times, last) in selected.items():
                if self.find(entry_id) is not None:
                    self.access(entry_id, last, selected=True, times=times)

    def reload_l1(self, path: Path | None = None) -> list[L1Problem]:
        """Re-read one L1 file (or all); a broken file keeps its last good version."""
        if self.l1 is None:
            return []
        if path is None:
            self.l1.reload_all()
        else:
            self.l1.reload_file(path)
        self.l1_problems = self.l1.problems()
        self.indexes.sync_l1()
        return list(self.l1_problems)

    def reload_l2(self, path: Path | None = None) -> None:
        """Take a person's edit of an L2 file (or of all of them): their changes against
        what the file held, committed as any change; a broken file is reported and waits."""
        l2 = self.commits.l2
        paths = [path] if path is not None else l2.folder.files()
        now = self.clock.now()
        for each in paths:
            edit = l2.read_edit(each, self.l2_entries)
            if edit is not None:
                self._take_edit(edit, now)
        self.commits.changed()

    def _take_edit(self, edit: Edit, now: datetime) -> None:
        changes.take_edit(self, edit, now)

    # ---- internals -----------------------------------------------------------------------

    def promote_many(self, entries: list[Entry], now: datetime, by: str) -> None:
        """Move L3 entries into L2 (see store.changes)."""
        changes.promote_many(self, entries, now, by)

    def fold(self, survivor: Entry, folded: Entry, now: datetime, by: str, **detail: Any) -> bool:
        """Merge `folded` into `survivor` (see store.changes); False when they stay apart."""
        return changes.fold(self, survivor, folded, now, by, **detail)

    def index(self, entry: Entry) -> None:
        """An L3 entry as it is now, into the lookups (and GC's index, once it is built)."""
        self.lookup.add(entry)
        if self._gc_index is not None:
            self._gc_index.add(entry)

    def reindex(self, entry: Entry, words: bool) -> None:
        """An L3 entry changed in place (a merge): into the lookups again, its words only
        when they changed (`words`): re-posting a survivor's unchanged words took 4 % of an
        add at 100,000 memories. GC's index takes it either way (its pair rule reads more
        than the words)."""
        if words:
            self.unindex(entry)
            self.index(entry)
        elif self._gc_index is not None:
            self._gc_index.add(entry)

    def unindex(self, entry: Entry) -> None:
        self.lookup.discard(entry)
        if self._gc_index is not None:
            self._gc_index.discard(entry.id)

    def gc_index(self) -> KeywordIndex:
        """GC's keyword index: made at the first full GC (which fills it, in steps: it is
        not `complete` until then), then kept in step by every change, so the next plan
        looks only from what changed (domain.similar_pairs)."""
        if self._gc_index is None:
            self._gc_index = KeywordIndex()
            self._gc_index.complete = False
        return self._gc_index

    def insert(self, entry: Entry) -> None:
        self.entries[entry.id] = entry
        self.texts.added(entry.id)
        self.index(entry)
        self._by_type[entry.type] += 1

    def drop(self, entry: Entry) -> None:
        self.unindex(entry)
        del self.entries[entry.id]
        self.texts.removed(entry.id)
        self._by_type[entry.type] -= 1
