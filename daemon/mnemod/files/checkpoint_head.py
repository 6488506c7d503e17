"""The head of a checkpoint (index.json): everything before its L3 entries.

`save_index` writes the head first and the L3 entries as the last field, so the head of a
100,000-entry file (some 70 MB) is read from its first bytes: the quick reads of what is
committed (store.reader, store.listing) and the checkpoint writer's look at the listing of
the file it replaces (files.l3_store) read it here, alike.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

FORMAT = "mnemod.l3/2"
ENTRIES_MARK = b',"entries":['  # where save_index's head ends and the L3 entries begin
_HEAD_LIMIT = 64 * 1024 * 1024  # the L2 entries are in the head: a generous bound


@dataclass(frozen=True)
class Head:
    """The checkpoint without its L3 entries."""

    log_seq: int
    last_event_id: str | None
    stats: dict[str, Any]
    l2: list[dict[str, Any]]
    l2_written: dict[str, str]
    entries_at: int  # where the L3 entries' list starts
    saved_at: str | None = None


def read_head(path: Path) -> Head | None:
    """The head of a checkpoint as mnemod writes it (None: none, or not in that layout)."""
    found = read_head_stat(path)
    return None if found is None else found[0]


def read_head_stat(path: Path) -> tuple[Head, os.stat_result] | None:
    """`read_head`, and the stat of the file it was read from."""
    try:
        with path.open("rb") as handle:
            seen = os.fstat(handle.fileno())
            data = handle.read(1 << 16)
            while ENTRIES_MARK not in data and len(data) < _HEAD_LIMIT:
                more = handle.read(len(data))
                if not more:
                    return None
                data += more
    except OSError:
        return None
    head = head_of(data)
    return None if head is None else (head, seen)


def head_of(data: bytes) -> Head | None:
    """The head of a checkpoint from its first bytes (or all of them)."""
    at = data.find(ENTRIES_MARK)
    if at < 0:
        return None
    try:
        head = orjson.loads(data[:at] + b"}")
    except orjson.JSONDecodeError:
        return None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        return None
    seq, stats, l2 = head.get("log_seq"), head.get("stats"), head.get("l2")
    last, written = head.get("last_event_id"), head.get("l2_written")
    if type(seq) is not int or not isinstance(stats, dict) or not isinstance(l2, list):
        return None
    if (last is not None and not isinstance(last, str)) or not isinstance(written, dict):
        return None
    saved = head.get("saved_at")
    saved = saved if isinstance(saved, str) else None
    return Head(seq, last, stats, l2, written, at + len(ENTRIES_MARK), saved)
