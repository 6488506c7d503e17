"""Opening a namespace: the checkpoint, then every change-log record after it, replayed.

Records are physical (an entry as it became, a removal, an access's fields), so replaying
one is the same whatever the config or the code that made it, and replaying it twice is
harmless. A torn last record was never committed: its events were never acknowledged and
are read again from Redis.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from mnemod.clock import Clock, parse_time
from mnemod.domain.model import Entry
from mnemod.errors import InvalidInputError
from mnemod.files.change_log import ChangeLog, CorruptLogError
from mnemod.files.entry_texts import EntryTexts
from mnemod.files.l3_store import L3Snapshot, load_index
from mnemod.store.commits import Commits, State
from mnemod.store.l2_layer import Edit, L2Files
from mnemod.store.paths import NamespacePaths

log = structlog.get_logger("mnemod.recovery")
_ID = operator.attrgetter("id")


@dataclass
class Recovered:
    state: State
    snapshot: L3Snapshot
    changelog: ChangeLog
    replayed: list[dict[str, Any]] = field(default_factory=list)  # their journal lines
    touched: set[str] = field(default_factory=set)  # the ids the replayed records name
    l2_written: dict[str, str] = field(default_factory=dict)


def recover(paths: NamespacePaths, readonly: bool) -> Recovered:
    snapshot = load_index(paths.index)
    state = State(
        entries=dict(zip(map(_ID, snapshot.entries), snapshot.entries, strict=True)),
        l2={e.id: e for e in snapshot.l2 or []},
        last_event_id=snapshot.last_event_id,
    )
    changelog = ChangeLog(paths.log_dir, readonly=readonly)
    recovered = Recovered(state, snapshot, changelog, l2_written=dict(snapshot.l2_written))
    count = 0
    for record in changelog.read_after(snapshot.log_seq):
        apply_record(state, record, changelog)
        recovered.touched.update(_named(record))
        recovered.l2_written.update(record.get("l2_written") or {})
        recovered.replayed.append(
            {
                "seq": record["seq"],
                "history": record.get("history") or [],
                "archive": record.get("archive") or [],
            }
        )
        count += 1
    if changelog.last_seq < snapshot.log_seq:
        changelog.last_seq = snapshot.log_seq  # a log pruned past, or removed by a person
    if count:
        log.info(
            "log.replayed", records=count, from_seq=snapshot.log_seq, to_seq=changelog.last_seq
        )
    return recovered


def apply_record(state: State, record: dict[str, Any], source: ChangeLog | None = None) -> None:
    """Apply one committed record to `state` (start-up replay; a follower's copy)."""
    where = f"record {record.get('seq')}"
    try:
        for op in _ops(record):
            _apply_op(state, op)
    except (InvalidInputError, KeyError, TypeError, ValueError) as exc:
        path = source.folder if source is not None else Path("log")
        raise CorruptLogError(path, f"{where}: {exc}") from exc
    if record.get("last_event_id") is not None:
        state.last_event_id = str(record["last_event_id"])


def _named(record: dict[str, Any]) -> Iterator[str]:
    """The ids of the entries a record's ops change (it applied, so they are well formed)."""
    for op in _ops(record):
        yield op["entry"]["id"] if op["op"] == "put" else op["id"]


def _ops(record: dict[str, Any]) -> Iterator[dict[str, Any]]:
    ops = record.get("ops") or []
    if not isinstance(ops, list):
        raise ValueError("ops must be a list")
    yield from ops


def _apply_op(state: State, op: dict[str, Any]) -> None:
    kind = op["op"]
    if kind == "put":
        entry = Entry.from_dict(op["entry"], where="put")
        if op["layer"] == "l2":
            state.entries.pop(entry.id, None)
            state.l2[entry.id] = entry
        else:
            state.l2.pop(entry.id, None)
            state.entries[entry.id] = entry
    elif kind == "del":
        state.entries.pop(op["id"], None)
        state.l2.pop(op["id"], None)
    elif kind == "acc":
        found = state.entries.get(op["id"]) or state.l2.get(op["id"])
        if found is None:
            return
        entry = found
        entry.access_count = int(op["access_count"])
        entry.selected_count = int(op["selected_count"])
        entry.last_accessed_at = parse_time(op["last_accessed_at"], "last_accessed_at")
        expires = op.get("expires_at")
        entry.expires_at = parse_time(expires, "expires_at") if expires else None
    else:
        raise ValueError(f"unknown op {kind!r}")


def read_committed(paths: NamespacePaths) -> State:
    """What is committed now (checkpoint + log), read without taking the lock or changing
    a file: for readers beside a running writer (the CLI, tests)."""
    return recover(paths, readonly=True).state


@dataclass
class Opened:
    """A namespace as opened: its state, its commits, the entries' kept JSON, a person's L2
    edits made while mnemod was away (for the engine to take), and whether its L2 entries
    came from the files (a store from before the change log)."""

    state: State
    commits: Commits
    texts: EntryTexts
    edits: list[Edit]
    migrated: bool
    recovered: bool = False  # index.json did not read: the state is its .bak's and the log's


def open_namespace(
    paths: NamespacePaths, clock: Clock, *, autosave: bool, readonly: bool
) -> Opened:
    """Recover the state, compare the L2 files with it, and set up the commits."""
    recovered = recover(paths, readonly)
    state = recovered.state
    l2 = L2Files(paths.l2_dir, clock)
    # A store from before the change log (or one a person began with L2 files): its L2
    # files are the truth until the first checkpoint holds them.
    migrated = recovered.snapshot.l2 is None and recovered.changelog.last_seq == 0
    if migrated:
        state.l2.update(l2.read_all())
        for entry_id in [i for i in state.entries if i in state.l2]:
            del state.entries[entry_id]  # promoted, the index not saved after: L2 wins
    edits = l2.reconcile(state.l2, recovered.l2_written)
    snapshot = recovered.snapshot
    refs = snapshot.refs
    if recovered.touched:  # replayed: as the log has them, not as the checkpoint does
        refs = {i: r for i, r in refs.items() if i not in recovered.touched}
    source = None if readonly or not refs else snapshot.open_source()
    texts = EntryTexts(state.entries.values(), source, refs)  # kept between checkpoints
    commits = Commits(
        paths,
        state,
        texts,
        clock,
        recovered.changelog,
        l2,
        checkpoint_seq=recovered.snapshot.log_seq,
        autosave=autosave,
        readonly=readonly,
    )
    for replayed in recovered.replayed:
        commits.queue_journal(replayed["seq"], replayed["history"], replayed["archive"])
    recovered_from = recovered.snapshot.recovered_from is not None
    return Opened(state, commits, texts, edits, migrated, recovered_from)
