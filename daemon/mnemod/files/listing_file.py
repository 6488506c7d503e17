"""listing.json: the L3 entries of one checkpoint as `mnemod list` prints them, derived from
it and written beside it, on the same thread, each time a checkpoint is written.

At 100,000 entries `list` from the checkpoint itself parses and checks 70 MB of entries
(about 0.6 s CPU) to print a line of each; this file holds only those lines, in
`Engine.select`'s order, so `list` reads a sixth of the bytes and formats none of them.

Layout: a header line, then the body: the entries' lines as `row_line` gives them for
layer l3, as UTF-8 text, each ended by a newline (`text_bytes` bytes), then one JSON object
of columns (the ids, created_at times, types, and each entry's reference into the
checkpoint, files.entry_texts.reference). `list` with nothing to add to or take from the
lines prints that text as it is, without parsing the columns (a fifth of the file) or
splitting the text. The header (`FORMAT`) names the checkpoint it was derived from
(`identity`: its log_seq, last_event_id, saved_at, and the file's size and modification
time) and holds the body's CRC-32. The file is
derived: a reader that finds it missing, of another checkpoint (a crash between the
checkpoint and this file, a checkpoint changed in place) or damaged reads the checkpoint
instead.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import compress, repeat
from operator import eq, gt, itemgetter
from pathlib import Path
from typing import Any

import orjson

from mnemod.files.atomic import atomic_write_chunks

FORMAT = "mnemod.listing/2"
NAME = "listing.json"
_COLUMNS = ("ids", "created", "types", "refs")
# created_at, id, type, line: rows compare in Engine.select's order (ids are unique)
Row = tuple[str, str, str, str]


def listing_path(index: Path) -> Path:
    """The listing file beside a checkpoint."""
    return index.with_name(NAME)


def identity(
    log_seq: int, last_event_id: str | None, saved_at: str | None, stat: os.stat_result
) -> dict[str, Any]:
    """What names one checkpoint, as the listing's header holds it: its head's position and
    time, and the file's size and time (a file changed in place is not the one listed)."""
    return {
        "log_seq": log_seq,
        "last_event_id": last_event_id,
        "saved_at": saved_at,
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
    }


def row_line(row: Mapping[str, Any], layer: str = "") -> str:
    """An entry's line in `list` and after a command, from its `to_dict()`."""
    expires = row["expires_at"] or "never"
    content = row["content"]
    if len(content) > 80:
        content = content[:77] + "..."
    content = content.replace("\n", " ")
    label = f" [{row['key']}]" if row["key"] else ""
    where = f"{layer} " if layer else ""
    return (
        f"{row['id']}  {where}{row['type']:<10} imp={row['importance']} "
        f"acc={row['access_count']} expires={expires}{label}  {content}"
    )


def row_of(raw: Mapping[str, Any]) -> Row:
    """An L3 entry's row from its object in the checkpoint."""
    return (raw["created_at"], raw["id"], raw["type"], row_line(raw, "l3"))


def save_listing(path: Path, named: dict[str, Any], rows: list[Row], refs: list[int]) -> None:
    """Write the listing of the checkpoint `named` (see `identity`): `rows` and `refs` in
    the checkpoint's order, sorted here as `Engine.select` sorts (created_at, then id)."""
    if any(map(gt, rows, rows[1:])):  # mostly in that order already; C calls throughout
        order = sorted(range(len(rows)), key=rows.__getitem__)
        rows, refs = list(map(rows.__getitem__, order)), list(map(refs.__getitem__, order))
    created, ids, types, lines = (list(map(itemgetter(k), rows)) for k in range(4))
    text = "".join(line + "\n" for line in lines).encode()
    columns = orjson.dumps({"ids": ids, "created": created, "types": types, "refs": refs})
    body = [text, columns, b"\n"]
    crc = zlib.crc32(columns + b"\n", zlib.crc32(text))
    named = {**named, "rows": len(rows), "text_bytes": len(text), "crc32": crc}
    header = orjson.dumps({"format": FORMAT, **named})
    atomic_write_chunks(path, [header, b"\n", *body])


@dataclass(frozen=True)
class Columns:
    """A listing file's columns, in `Engine.select`'s order."""

    ids: list[str]
    created: list[str]
    types: list[str]
    refs: list[int]

    def key(self, at: int) -> tuple[str, str]:
        """The row's place in the order: (created_at, id)."""
        return self.created[at], self.ids[at]


@dataclass(frozen=True)
class Listing(Columns):
    """A listing file's columns and lines."""

    lines: list[str]

    def rows(self) -> dict[int, Row]:
        """Each row by its reference into the checkpoint."""
        rows = zip(self.created, self.ids, self.types, self.lines, strict=True)
        return dict(zip(self.refs, rows, strict=True))


@dataclass(frozen=True)
class ListingText:
    """A listing file of the wanted checkpoint whose checksum holds: its lines, as the file
    holds them (UTF-8, each ended by a newline; 16 MB at 100,000 entries, printed without
    being decoded), and its columns still unparsed."""

    text: memoryview
    count: int
    columns: memoryview
    raw: bytes  # the whole file: the header line, the text, the columns

    def parsed(self) -> Columns | None:
        """The columns, parsed and checked (lengths, types, order, unique ids); None when
        they are not as mnemod writes them."""
        try:
            data = orjson.loads(self.columns)
            ids, created, types, refs = (data[name] for name in _COLUMNS)
        except (ValueError, TypeError, KeyError):  # orjson's decode error is a ValueError
            return None
        count = self.count
        if not all(type(c) is list and len(c) == count for c in (ids, created, types, refs)):
            return None
        if not all(all(map(isinstance, c, repeat(str))) for c in (ids, created, types)):
            return None
        if not all(map(isinstance, refs, repeat(int))) or len(set(ids)) != count:
            return None
        if any(map(gt, created, created[1:])):  # the order, in C calls: times, then ids on ties
            return None
        ties = compress(range(count - 1), map(eq, created, created[1:]))
        if any(ids[at] > ids[at + 1] for at in ties):
            return None
        return Columns(ids, created, types, refs)

    def line_bytes(self) -> list[bytes]:
        """The lines, each as its UTF-8 bytes without its newline."""
        return self.raw.split(b"\n")[1 : 1 + self.count]  # the header is one line

    def full(self) -> Listing | None:
        """The columns (see `parsed`) and the lines; None when they are not as mnemod
        writes them."""
        columns = self.parsed()
        try:
            lines = str(self.text, "utf-8").split("\n")[:-1]
        except ValueError:  # not UTF-8
            return None
        if columns is None:
            return None
        return Listing(columns.ids, columns.created, columns.types, columns.refs, lines)


def read_derived(
    path: Path, layout: str, named: dict[str, Any]
) -> tuple[dict[str, Any], bytes, int] | None:
    """A file derived from a checkpoint (this listing, files.entries_cache): (its header,
    its bytes, where its header line ends) when its header line is of the layout and names
    the checkpoint `named` (see `identity`); None otherwise, or when it cannot be read.
    Its body's checksum is the caller's to check."""
    try:
        raw = path.read_bytes()
        cut = raw.index(b"\n")
        header = orjson.loads(raw[:cut])
    except (OSError, ValueError):  # orjson's decode error is a ValueError
        return None
    if not isinstance(header, dict) or header.get("format") != layout:
        return None
    if any(header.get(k) != v for k, v in named.items()):
        return None
    return header, raw, cut


def read_listing_text(path: Path, named: dict[str, Any]) -> ListingText | None:
    """The listing at `path` when it is of the checkpoint `named` and whole (its checksum
    holds, its text has a line for each row); None otherwise (missing, of another
    checkpoint, of another layout, damaged)."""
    found = read_derived(path, FORMAT, named)
    if found is None:
        return None
    header, raw, cut = found
    body = memoryview(raw)[cut + 1 :]
    if raw[-1:] != b"\n" or header.get("crc32") != zlib.crc32(body):
        return None
    size, count = header.get("text_bytes"), header.get("rows")
    if type(size) is not int or type(count) is not int or not 0 <= size < len(body):
        return None
    text = body[:size]
    if raw.count(b"\n", cut + 1, cut + 1 + size) != count or (count and text[-1] != 10):
        return None
    return ListingText(text, count, body[size:], raw)


def read_listing(path: Path, named: dict[str, Any]) -> Listing | None:
    """The listing at `path` when it is of the checkpoint `named`, whole and in order; None
    otherwise (missing, of another checkpoint, damaged)."""
    found = read_listing_text(path, named)
    return None if found is None else found.full()
