"""listing.json: the L3 entries of one checkpoint as `mnemod list` prints them, derived from
it and written beside it, on the same thread, each time a checkpoint is written.

At 100,000 entries `list` from the checkpoint itself parses and checks 70 MB of entries
(about 0.6 s CPU) to print a line of each; this file holds only those lines, in
`Engine.select`'s order, so `list` reads a sixth of the bytes and formats none of them.

Layout: a header line, then the body, one JSON object of columns (the ids, created_at
times, types, each entry's reference into the checkpoint (files.entry_texts.reference),
and its line as `row_line` gives it for layer l3), JSON-escaped. The header (`FORMAT`)
names the checkpoint it was derived from (`identity`: its log_seq, last_event_id, saved_at,
and the file's size and modification time) and holds the body's CRC-32. The file is
derived: a reader that finds it missing, of another checkpoint (a crash between the
checkpoint and this file, a checkpoint changed in place) or damaged reads the checkpoint
instead.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import repeat
from operator import gt, itemgetter
from pathlib import Path
from typing import Any

import orjson

from mnemod.files.atomic import atomic_write_chunks

FORMAT = "mnemod.listing/1"
NAME = "listing.json"
_COLUMNS = ("ids", "created", "types", "refs", "lines")
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
    columns = {"ids": ids, "created": created, "types": types, "refs": refs, "lines": lines}
    body = orjson.dumps(columns)
    header = orjson.dumps({"format": FORMAT, **named, "rows": len(rows), "crc32": zlib.crc32(body)})
    atomic_write_chunks(path, [header, b"\n", body, b"\n"])


@dataclass(frozen=True)
class Listing:
    """A listing file's columns, in `Engine.select`'s order."""

    ids: list[str]
    created: list[str]
    types: list[str]
    refs: list[int]
    lines: list[str]
    keys: list[tuple[str, str]]  # (created_at, id) of each: the order

    def rows(self) -> dict[int, Row]:
        """Each row by its reference into the checkpoint."""
        rows = zip(self.created, self.ids, self.types, self.lines, strict=True)
        return dict(zip(self.refs, rows, strict=True))


def read_listing(path: Path, named: dict[str, Any]) -> Listing | None:
    """The listing at `path` when it is of the checkpoint `named`, whole and in order; None
    otherwise (missing, of another checkpoint, damaged)."""
    try:
        raw = path.read_bytes()
        cut = raw.index(b"\n")
        header = orjson.loads(raw[:cut])
        if raw[-1:] != b"\n":
            return None
        body = memoryview(raw)[cut + 1 : -1]
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            return None
        if any(header.get(k) != v for k, v in named.items()):
            return None
        if header.get("crc32") != zlib.crc32(body):
            return None
        data = orjson.loads(body)
        columns = [data[name] for name in _COLUMNS]
    except (OSError, ValueError, TypeError, KeyError):  # orjson's decode error is a ValueError
        return None
    count = header.get("rows")
    if not all(type(c) is list and len(c) == count for c in columns):
        return None
    ids, created, types, refs, lines = columns
    keys = list(zip(created, ids, strict=True))
    if any(map(gt, keys, keys[1:])) or len(set(ids)) != len(ids):
        return None
    strings = (ids, created, types, lines)
    if not all(all(map(isinstance, c, repeat(str))) for c in strings):
        return None
    if not all(map(isinstance, refs, repeat(int))):
        return None
    return Listing(ids, created, types, refs, lines, keys)
