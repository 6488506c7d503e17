"""A follower's copy of a namespace: the leader's records applied to this daemon's own files,
and a copy started from the leader's checkpoint.

A record is applied as recovery replays it (store.recovery.apply_record): appended to the
log byte for byte (so both logs name it by the same CRC), applied to the state, and the
engine's lookups, recall and stored texts kept in step; the journal lines and L2 files follow
as after a commit of our own. A copy is started from a checkpoint by writing it as this
folder's index.json with the record it ends at as the log's first: opening it is then plain
recovery. A folder that held anything is moved aside first, for a person to look at.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import structlog

from mnemod.files.atomic import atomic_write_bytes, fsync_dir
from mnemod.files.change_log import CorruptLogError, decode_record
from mnemod.store.engine import Engine
from mnemod.store.paths import ASIDE_FOLDER, NamespacePaths
from mnemod.store.recovery import apply_record

log = structlog.get_logger("mnemod.replica")
FOLDER_ID = ".folder-id"


def folder_id(paths: NamespacePaths) -> str:
    """This namespace folder's id, made at its first use: how a daemon tells that the
    leader writes the very folder it would follow into (two daemons on one data folder, on
    one host or sharing a mount), which it cannot follow but stands by for."""
    path = paths.root / FOLDER_ID
    try:
        return path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        paths.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        made = uuid.uuid4().hex
        atomic_write_bytes(path, made.encode())
        return made


def decode_lines(lines: Iterable[tuple[int, bytes]]) -> list[tuple[dict[str, Any], bytes]]:
    """The records of the leader's lines, each checked (CRC, its seq); CorruptLogError
    names the first that does not read."""
    found = []
    for seq, line in lines:
        record = decode_record(line)
        if record is None or record["seq"] != seq:
            raise CorruptLogError(Path("feed"), f"record {seq} does not read")
        found.append((record, line))
    return found


def apply_records(engine: Engine, records: list[tuple[dict[str, Any], bytes]]) -> None:
    """Apply the leader's records (the next after this copy's last, in order)."""
    if not records:
        return
    engine.commits.adopt(records)  # durable first: a crash replays them at the next open
    for record, _ in records:
        changed, accessed = _ids(record)
        for entry_id in changed:
            old = engine.entries.get(entry_id)
            if old is not None:
                engine.drop(old)
        apply_record(engine.state, record, engine.commits.log)
        for entry_id in changed:  # resolve's view follows (or, still being built, takes it)
            entry = engine.entries.get(entry_id)
            if entry is not None:
                engine.insert(entry)
            engine.indexes.touched(entry_id, "update")
        for entry_id in accessed:  # changed in place: serialized again, ranked as used
            engine.texts.forget(entry_id)
            engine.indexes.touched(entry_id, "access")
    engine.drain_changes()  # the hot layer is the leader's to write
    engine.commits.derive()


def _ids(record: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The ids a record puts or removes, and those whose accesses it records."""
    changed: list[str] = []
    accessed: list[str] = []
    for op in record.get("ops") or []:
        if isinstance(op, dict):
            entry = op.get("entry")
            found = op.get("id") or (entry.get("id") if isinstance(entry, dict) else None)
            if isinstance(found, str):
                (accessed if op.get("op") == "acc" else changed).append(found)
    return changed, accessed


def _holds_anything(root: Path) -> bool:
    """Files in the folder besides what a first open makes (its lock, its id): a copy, or
    anything a person may want, is set aside rather than removed."""
    return any(p.is_file() and p.name not in (".lock", FOLDER_ID) for p in root.rglob("*"))


def start_from_checkpoint(
    paths: NamespacePaths, seq: int, line: bytes, index: bytes
) -> Path | None:
    """Make this folder the checkpoint of `seq` (index.json, and `line`, its last record, as
    the log's first). The folder must not be open. The copy is made beside it and renamed
    into place, so that a crash leaves the old folder or the whole new one, never a log
    without its checkpoint; a folder holding anything is moved aside first. Returns where
    to (None: it held nothing)."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    aside_root = paths.data_dir / ASIDE_FOLDER
    aside_root.mkdir(mode=0o700, parents=True, exist_ok=True)
    fresh = NamespacePaths(aside_root, f"{paths.namespace}-{stamp}.partial")
    for folder in (fresh.root, fresh.l3_dir, fresh.log_dir, fresh.l2_dir):
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    atomic_write_bytes(fresh.index, index)
    if line:
        atomic_write_bytes(fresh.log_dir / f"{seq:012d}.jsonl", line)
    aside = None
    if paths.root.exists():
        if _holds_anything(paths.root):
            aside = aside_root / f"{paths.namespace}-{stamp}"
            os.replace(paths.root, aside)
            log.warning("replica.folder_set_aside", namespace=paths.namespace, aside=str(aside))
        else:
            shutil.rmtree(paths.root)  # the empty folders (and id) a first open made
    os.replace(fresh.root, paths.root)
    fsync_dir(paths.data_dir)
    log.info("replica.started_from_checkpoint", namespace=paths.namespace, seq=seq)
    return aside
