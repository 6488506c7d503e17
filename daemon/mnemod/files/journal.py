"""Append-only JSON-lines records: history.jsonl (every change and who made it) and
archive.jsonl (expired or removed entries, whole, with the reason — nothing just vanishes)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from mnemod.clock import format_time
from mnemod.domain.model import Entry
from mnemod.files.atomic import append_lines


class Journal:
    """Buffers records and writes them with one fsync per flush (a batch, a GC run)."""

    def __init__(self, history_path: Path, archive_path: Path) -> None:
        self.history_path = history_path
        self.archive_path = archive_path
        self._history: list[str] = []
        self._archive: list[str] = []

    def record(
        self,
        now: datetime,
        op: str,
        entry_id: str,
        by: str,
        **detail: Any,
    ) -> None:
        record = {"at": format_time(now), "op": op, "id": entry_id, "by": by, **detail}
        self._history.append(json.dumps(record, ensure_ascii=False, sort_keys=False))

    def archive(self, now: datetime, entry: Entry, reason: str, by: str) -> None:
        record = {
            "archived_at": format_time(now),
            "reason": reason,
            "by": by,
            "entry": entry.to_dict(),
        }
        self._archive.append(json.dumps(record, ensure_ascii=False))

    def flush(self) -> None:
        """Archive first: an entry leaves the index only after its archived copy is durable."""
        append_lines(self.archive_path, self._archive)
        self._archive.clear()
        append_lines(self.history_path, self._history)
        self._history.clear()

    def discard(self) -> None:
        self._history.clear()
        self._archive.clear()

    def sizes(self) -> dict[str, int]:
        """Byte lengths of both files, recorded in each snapshot."""
        return {
            "history": _size(self.history_path),
            "archive": _size(self.archive_path),
        }

    def truncate_to(self, recorded: dict[str, Any]) -> dict[str, int]:
        """Cut each file back to its recorded length when it grew past it; returns the
        bytes cut per file. A file shorter than recorded (rotated by a person) is left."""
        cut: dict[str, int] = {}
        for name, path in (("history", self.history_path), ("archive", self.archive_path)):
            length = recorded.get(name)
            if not isinstance(length, int) or isinstance(length, bool) or length < 0:
                continue
            size = _size(path)
            if size > length:
                with path.open("r+b") as handle:
                    handle.truncate(length)
                    handle.flush()
                    os.fsync(handle.fileno())
                cut[path.name] = size - length
        return cut

    @property
    def pending(self) -> bool:
        return bool(self._history or self._archive)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Records of a JSON-lines file; a torn last line (crash mid-append) is skipped."""
    if not path.exists():
        return
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict):
                yield record


def story(path: Path, entry_id: str) -> list[dict[str, Any]]:
    """Every history record about `entry_id`, following merges both ways."""
    records = list(read_jsonl(path))
    wanted = {entry_id}
    changed = True
    while changed:
        changed = False
        for record in records:
            related = {record.get("id"), *record.get("merged", []), record.get("into")}
            related.discard(None)
            if wanted & related and not related <= wanted:
                wanted |= {str(r) for r in related}
                changed = True
    return [
        r
        for r in records
        if r.get("id") in wanted or wanted & set(r.get("merged", [])) or r.get("into") in wanted
    ]
