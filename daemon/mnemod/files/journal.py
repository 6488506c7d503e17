"""Append-only JSON-lines records: history.jsonl (every change and who made it) and
archive.jsonl (expired, removed, folded or superseded entries, whole, with the reason —
nothing just vanishes). Both are derived from the change log."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import structlog

from mnemod.clock import format_time
from mnemod.domain.model import Entry
from mnemod.files.atomic import (
    Appender,
    ensure_whole_lines,
    fsync_file,
    lines_backward,
    whole_lines,
)

_SEQ_AT_END = re.compile(rb'"seq": (\d+)\}\s*$')  # how `write` ends each line
log = structlog.get_logger("mnemod.journal")


class Journal:
    """The history and archive records of the changes not yet committed: they go into the
    next change-log record, and from there to the files (JournalFiles)."""

    def __init__(self) -> None:
        self.history: list[dict[str, Any]] = []
        self.archived: list[dict[str, Any]] = []

    def record(self, now: datetime, op: str, entry_id: str, by: str, **detail: Any) -> None:
        self.history.append({"at": format_time(now), "op": op, "id": entry_id, "by": by, **detail})

    def archive(self, now: datetime, entry: Entry, reason: str, by: str) -> None:
        self.archived.append(
            {"archived_at": format_time(now), "reason": reason, "by": by, "entry": entry.to_dict()}
        )

    def take(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The buffered records, emptied."""
        taken = (self.history, self.archived)
        self.history, self.archived = [], []
        return taken

    @property
    def pending(self) -> bool:
        return bool(self.history or self.archived)


class JournalFiles:
    """history.jsonl and archive.jsonl, brought up to date from committed records. Each
    line carries the seq of its commit, so a line already there is never appended again
    (after a crash between the append and the next commit, or a retried append).

    A commit's lines go in one append, which a kill -9 can cut short (the kernel stops a
    write at a page boundary when the process is killed): the file then ends with the
    first of them. At open, the last seq is read and that commit counts as not written yet;
    writing it again counts the lines at the end with its seq and appends only the rest."""

    def __init__(self, history_path: Path, archive_path: Path, readonly: bool = False) -> None:
        self.paths = {"history": history_path, "archive": archive_path}
        self.written: dict[str, int] = {}
        self._appenders = {name: Appender() for name in self.paths}
        # the seq of the last lines at open, whose count `write` takes if it writes that
        # commit again (counted then: a bulk import's commit is 100,000 lines to read back)
        self._begun: dict[str, int] = {}
        for name, path in self.paths.items():
            if not readonly:
                cut = ensure_whole_lines(path)
                if cut:
                    log.warning("journal.torn_line_cut", file=str(path), bytes=cut)
            seq, count = last_commit(path, only_seq=True)
            self.written[name] = seq - 1 if count else seq
            if count:
                self._begun[name] = seq

    @property
    def through(self) -> int:
        """Every record up to this seq is in both files."""
        return min(self.written.values())

    def write(
        self, seq: int, history: list[dict[str, Any]], archived: list[dict[str, Any]]
    ) -> None:
        """Append one commit's lines (archive first: an entry's archived copy is on disk
        before its removal is told); a file that already has `seq` is skipped, one that
        has its first lines gets the rest."""
        for name, records in (("archive", archived), ("history", history)):
            if self.written[name] >= seq:
                continue
            begun = self._begun.pop(name, 0)
            done = last_commit(self.paths[name])[1] if begun == seq else 0
            lines = [json.dumps({**r, "seq": seq}, ensure_ascii=False) for r in records[done:]]
            if lines:  # not fsynced: the log holds the records until `sync` (before it is pruned)
                self._appenders[name].append(self.paths[name], whole_lines(lines), sync=False)
            self.written[name] = seq

    def sync(self) -> None:
        """Make what was appended durable (the log's records of it may go after this)."""
        for path in self.paths.values():
            fsync_file(path)

    def close(self) -> None:
        for appender in self._appenders.values():
            appender.close()


def last_commit(path: Path, only_seq: bool = False) -> tuple[int, int]:
    """The seq of the last line that has one and how many lines at the end carry it;
    (0, 0) for none (a file of before the change log, or none at all). A line at the very
    end that does not read (torn, in a file opened read-only) is passed over. `only_seq`:
    the count is 1, the lines before the last not read."""
    seq, count = 0, 0
    for line in lines_backward(path):
        found = _line_seq(line)
        if found is None:
            if count or _reads(line):
                break
            continue
        if count and found != seq:
            break
        seq, count = found, count + 1
        if only_seq:
            break
    return seq, count


def _line_seq(line: bytes) -> int | None:
    match = _SEQ_AT_END.search(line, max(0, len(line) - 40))
    if match is not None:
        return int(match.group(1))
    try:
        record = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    found = record.get("seq") if isinstance(record, dict) else None
    return found if isinstance(found, int) and not isinstance(found, bool) else None


def _reads(line: bytes) -> bool:
    try:
        json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    return True


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
