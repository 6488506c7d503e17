"""The change log: the one commit point of a namespace.

Every change reaches `<ns>/log/` first, as one JSON line per commit, appended and fsynced;
everything else on disk (the checkpoint, the L2 files, history.jsonl, archive.jsonl) and the
Redis hot layer is derived from it. A record is

    {"seq": 7, "at": "…", "last_event_id": "…", "events": [...], "ops": [...],
     "history": [...], "archive": [...], "crc": 123}

with `crc` the CRC-32 of the line's bytes before `,"crc":`. Segments are named by the first
seq they hold (`000000000007.jsonl`) and a new one starts once a segment passes
SEGMENT_BYTES; a checkpoint lets the segments wholly before it go.

A last line that is torn (a crash or a full disk mid-append) is not a commit: it is cut off
when the log is opened for writing and skipped when it is only read. A bad line anywhere
else is corruption and is refused (CorruptLogError), never skipped.
"""

from __future__ import annotations

import itertools
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import structlog

from mnemod.errors import CorruptFileError
from mnemod.files.atomic import Appender, fsync_dir

log = structlog.get_logger("mnemod.log")
SEGMENT_BYTES = 32 * 1024 * 1024
HELD_LINE_BYTES = 1 << 16  # a longer last line is read back from its segment when asked for
_CRC_MARK = b',"crc":'
_SEQ_MARK = b'{"seq":'


class CorruptLogError(CorruptFileError):
    """A record of the change log that is not the torn last one does not read."""


def encode_record(record: dict[str, Any]) -> bytes:
    """One record as its line, `crc` appended."""
    body = orjson.dumps(record)
    if not body.startswith(b"{") or body == b"{}":
        raise ValueError("a change-log record is a non-empty JSON object")
    crc = zlib.crc32(body[:-1])
    return body[:-1] + _CRC_MARK + str(crc).encode() + b"}\n"


def line_crc(line: bytes) -> int:
    """The CRC a record's line carries (its identity in the namespace's history: two
    different records of one seq differ in it); 0 when the line holds none."""
    mark = line.rfind(_CRC_MARK)
    try:
        return int(line[mark + len(_CRC_MARK) : -2]) if mark > 0 else 0
    except ValueError:
        return 0


def _checked(data: bytes, start: int = 0, end: int | None = None) -> int:
    """Where the CRC mark of the line data[start:end] (all of `data` by default) starts,
    when its CRC holds; 0 for a torn or damaged line. The line is read in place (its CRC
    summed over a view): a bulk import's line is 80 MB, not copied to be checked."""
    end = len(data) if end is None else end
    if end - start < 2 or data[end - 2 : end] != b"}\n":
        return 0
    mark = data.rfind(_CRC_MARK, start, end)
    if mark <= start:
        return 0
    try:
        crc = int(data[mark + len(_CRC_MARK) : end - 2])
    except ValueError:
        return 0
    return mark if zlib.crc32(memoryview(data)[start:mark]) == crc else 0


def leading_seq(line: bytes) -> int | None:
    """The seq a line gives at its start as `encode_record` writes it (`{"seq":7,`), its
    CRC not checked and the rest not read; None for a line that does not start so."""
    if line.startswith(_SEQ_MARK):
        end = line.find(b",", len(_SEQ_MARK), len(_SEQ_MARK) + 21)
        digits = line[len(_SEQ_MARK) : end] if end > 0 else b""
        if digits.isdigit():
            return int(digits)
    return None


def record_seq(line: bytes) -> int | None:
    """The seq of a line whose CRC holds, read from its start (`leading_seq`) without
    decoding the rest (a record of a bulk import holds 80 MB of entries); other lines are
    decoded. None when the line is torn or damaged."""
    return _seq_in(line, 0, len(line))


def _seq_in(data: bytes, start: int, end: int) -> int | None:
    """`record_seq` of the line data[start:end], read in place."""
    if not _checked(data, start, end):
        return None
    seq = leading_seq(data[start : start + len(_SEQ_MARK) + 21])
    if seq is not None:
        return seq
    record = decode_record(data[start:end])
    return None if record is None else int(record["seq"])


def _seq_at(data: bytes, start: int, end: int) -> tuple[int | None, bytes | None]:
    """`record_seq` of the line data[start:end], with the line when it is short; a long
    one is checked in place and not copied."""
    if end - start <= HELD_LINE_BYTES:
        line = data[start:end]
        return record_seq(line), line
    return _seq_in(data, start, end), None


def decode_record(line: bytes) -> dict[str, Any] | None:
    """The record of one line, or None when it is torn or damaged."""
    mark = _checked(line)
    if not mark:
        return None
    try:
        record = orjson.loads(line[:mark] + b"}")
    except orjson.JSONDecodeError:
        return None
    return record if isinstance(record, dict) and isinstance(record.get("seq"), int) else None


@dataclass(frozen=True)
class Segment:
    path: Path
    first_seq: int


class ChangeLog:
    """Appends records with one fsync per commit; reads them back from a given seq."""

    def __init__(self, folder: Path, *, readonly: bool = False) -> None:
        self.folder = folder
        self.readonly = readonly
        self.last_seq = 0
        self._newest: Path | None = None
        self._size = 0  # bytes of the newest segment
        self._older = 0  # bytes of the segments before it
        # (seq, byte offset) of each record of the newest segment as opened, checked then:
        # read_after starts there instead of reading and checking the segment again
        self._opened: list[tuple[int, int]] = []
        self._opened_path: Path | None = None
        self._opened_end = 0  # where the last of them ends
        # the last record's line (None: log empty), or where a long one lies in its segment
        self._last: bytes | tuple[Path, int, int] | None = None
        self._last_crc: int | None = None
        self._appender = Appender()  # the newest segment, held open between appends
        self._open()

    # ---- reading ---------------------------------------------------------------------
    def segments(self) -> list[Segment]:
        if not self.folder.is_dir():
            return []
        found = []
        for path in self.folder.glob("*.jsonl"):
            if path.stem.isdigit():
                found.append(Segment(path, int(path.stem)))
        return sorted(found, key=lambda s: s.first_seq)

    def read_after(self, seq: int) -> Iterator[dict[str, Any]]:
        """Every durable record with a seq above `seq`, in order."""
        for record, _ in self.lines_after(seq):
            yield record

    def lines_after(self, seq: int) -> Iterator[tuple[dict[str, Any], bytes]]:
        """Like `read_after`, each record with its line as stored."""
        segments = self.segments()
        for position, segment in enumerate(segments):
            following = segments[position + 1] if position + 1 < len(segments) else None
            if following is not None and following.first_seq <= seq + 1:
                continue  # wholly at or before `seq`
            last = following is None
            if last and segment.path == self._opened_path and self._opened:
                yield from self._newest_after(segment.path, seq)
            else:
                yield from self._records(segment.path, last, seq)

    def _newest_after(self, path: Path, seq: int) -> Iterator[tuple[dict[str, Any], bytes]]:
        """The records above `seq` of the newest segment: those `_open` checked, read from
        the first of them on, then any appended since (checked as they are read)."""
        starts = [at for found, at in self._opened if found > seq]
        with path.open("rb") as handle:
            # none: from the end of the last record `_open` saw (at or below `seq`; not read
            # again to find its end, a bulk import's record being tens of MB)
            handle.seek(starts[0] if starts else self._opened_end)
            rest = handle.read()
        lines = rest.splitlines(keepends=True)
        for number, line in enumerate(lines, start=1):
            record = decode_record(line)
            if record is not None:
                if record["seq"] > seq:
                    yield record, line
                continue
            if number == len(lines):
                return  # a torn last record: never committed
            raise CorruptLogError(path, "damaged record (bad CRC or JSON)")

    def _records(
        self, path: Path, last_segment: bool, after: int
    ) -> Iterator[tuple[dict[str, Any], bytes]]:
        """The records of one segment with a seq above `after` (those at or below it are
        checked, not decoded)."""
        with path.open("rb") as handle:
            lines = handle.readlines()
        for number, line in enumerate(lines, start=1):
            found = record_seq(line)
            if found is not None and found <= after:
                continue
            record = decode_record(line) if found is not None else None
            if record is not None:
                yield record, line
                continue
            if last_segment and number == len(lines):
                return  # the torn last record: never committed
            raise CorruptLogError(path, "damaged record (bad CRC or JSON)", number)

    def _open(self) -> None:
        """Find the last seq; cut a torn last line when writing."""
        segments = self.segments()
        if not segments:
            return
        newest = segments[-1]
        self._newest = newest.path
        self._older = sum(s.path.stat().st_size for s in segments[:-1])
        data = newest.path.read_bytes()
        good = len(data)
        last_seq = newest.first_seq - 1
        at = 0
        opened: list[tuple[int, int]] = []
        number = 0
        while at < len(data):  # no copy of the segment split in lines: a view of each long one
            number += 1
            end = data.find(b"\n", at) + 1 or len(data)
            found, line = _seq_at(data, at, end)
            if found is None:
                if end != len(data):
                    raise CorruptLogError(newest.path, "damaged record (bad CRC or JSON)", number)
                good = at
                break
            opened.append((found, at))
            self._keep_last(newest.path, at, end - at, line)
            at = end
            last_seq = found
        self._opened, self._opened_path, self._opened_end = opened, newest.path, good
        if good < len(data) and not self.readonly:
            with newest.path.open("r+b") as handle:
                handle.truncate(good)
                os.fsync(handle.fileno())
            log.warning("log.torn_record_cut", file=str(newest.path), bytes=len(data) - good)
        self._size = good
        self.last_seq = max(last_seq, 0)

    # ---- writing ---------------------------------------------------------------------
    def append(self, records: list[dict[str, Any]]) -> None:
        """Append and fsync; `records` carry their seq, one above the last. On failure
        (a full or read-only disk) whatever reached the file is cut again and the error
        goes up: the log is as it was, and the same records may be appended later."""
        self.append_lines([encode_record(r) for r in records], [r["seq"] for r in records])

    def append_lines(self, lines: list[bytes], seqs: list[int] | None = None) -> None:
        """`append` of records already encoded (the leader's lines a follower applies,
        kept byte for byte so that both logs name a record by the same CRC). `seqs`: the
        lines' seqs when the caller encoded them itself; otherwise each line's CRC is
        checked and its seq read from it."""
        if not lines:
            return
        if self.readonly:
            raise OSError(f"{self.folder}: opened read-only")
        seq = self.last_seq
        for found in seqs if seqs is not None else map(record_seq, lines):
            if found is None or found != seq + 1:
                got = "a damaged line" if found is None else f"seq {found}"
                raise ValueError(f"{self.folder}: {got} after record {seq}")
            seq = found
        data = b"".join(lines)
        path = self._segment_for(self.last_seq + 1)
        before = self._appender.append(path, data)
        if before == 0:
            fsync_dir(self.folder)
        self._newest = path
        self._size = before + len(data)
        self.last_seq = seq
        last = lines[-1]
        self._keep_last(path, self._size - len(last), len(last), last)

    def close(self) -> None:
        """Close the newest segment's descriptor (an append opens it again)."""
        self._appender.close()

    def _keep_last(self, path: Path, offset: int, length: int, line: bytes | None) -> None:
        """Hold the last record's line (given when it is short), or only where it lies when
        it is long (a bulk import's record is tens of MB, held for as long as it stays the
        last)."""
        self._last = (
            line if line is not None and length <= HELD_LINE_BYTES else (path, offset, length)
        )
        self._last_crc = None  # worked out when first asked for

    @property
    def last_line(self) -> bytes | None:
        """The last record's line (None: the log is empty, or the segment holding it went)."""
        last = self._last
        if not isinstance(last, tuple):
            return last
        path, offset, length = last
        try:
            with path.open("rb") as handle:
                handle.seek(offset)
                line = handle.read(length)
        except OSError:
            return None
        if len(line) != length or not line.endswith(b"\n"):
            return None
        ours = leading_seq(line) == self.last_seq or record_seq(line) == self.last_seq
        return line if ours else None

    @property
    def last_crc(self) -> int | None:
        """The last record's CRC; 0 for an empty history; None when the log was pruned
        past its last record (a person removed it): the history cannot be told then."""
        if self._last_crc is not None:
            return self._last_crc
        line = self.last_line
        if line is None:
            return 0 if self.last_seq == 0 else None
        self._last_crc = line_crc(line)  # a long line is read back and summed once
        return self._last_crc

    def _segment_for(self, seq: int) -> Path:
        """The newest segment, or a new one once it has passed SEGMENT_BYTES."""
        if self._newest is not None and self._size < SEGMENT_BYTES:
            return self._newest
        self._older += self._size
        self._size = 0
        return self.folder / f"{seq:012d}.jsonl"

    def prune_before(self, seq: int) -> int:
        """Remove the segments that hold only records below `seq` (never the newest);
        returns how many."""
        segments = self.segments()
        removed = 0
        for segment, following in itertools.pairwise(segments):
            if following.first_seq <= seq:
                segment.path.unlink()
                removed += 1
        if removed:
            fsync_dir(self.folder)
            self._older = sum(s.path.stat().st_size for s in self.segments()) - self._size
        return removed

    @property
    def size(self) -> int:
        """Bytes in all segments (kept as they are written: read on every writer step)."""
        return self._older + self._size
