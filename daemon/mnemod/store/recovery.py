"""Opening a namespace: the checkpoint, then every change-log record after it, replayed.

Records are physical (an entry as it became, a removal, an access's fields), so replaying
one is the same whatever the config or the code that made it, and replaying it twice is
harmless. A torn last record was never committed: its events were never acknowledged and
are read again from Redis.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from mnemod.clock import parse_time
from mnemod.domain.model import Entry
from mnemod.errors import InvalidInputError
from mnemod.files.change_log import ChangeLog, CorruptLogError
from mnemod.files.l3_store import L3Snapshot, load_index
from mnemod.store.commits import State
from mnemod.store.paths import NamespacePaths

log = structlog.get_logger("mnemod.recovery")


@dataclass
class Recovered:
    state: State
    snapshot: L3Snapshot
    changelog: ChangeLog
    replayed: list[dict[str, Any]] = field(default_factory=list)  # their journal lines
    l2_written: dict[str, str] = field(default_factory=dict)


def recover(paths: NamespacePaths, readonly: bool) -> Recovered:
    snapshot = load_index(paths.index)
    state = State(
        entries={e.id: e for e in snapshot.entries},
        l2={e.id: e for e in snapshot.l2 or []},
        last_event_id=snapshot.last_event_id,
    )
    changelog = ChangeLog(paths.log_dir, readonly=readonly)
    recovered = Recovered(state, snapshot, changelog, l2_written=dict(snapshot.l2_written))
    count = 0
    for record in changelog.read_after(snapshot.log_seq):
        apply_record(state, record, changelog)
        recovered.l2_written.update(record.get("l2_written") or {})
        recovered.replayed.append(
            {"seq": record["seq"], "history": record.get("history") or [],
             "archive": record.get("archive") or []}
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
