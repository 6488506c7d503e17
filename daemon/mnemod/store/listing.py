"""The committed L3 and L2 entries as `mnemod list` prints them, without making an Entry of
each: opening the namespace (every entry made, then its lookups) took 4 s at 100,000.

The checkpoint is read once and its entries array parsed a slice at a time
(files.l3_store.entry_slices); each entry stays the dict it was written as (`Entry.to_dict`,
by mnemod), checked in one linear-time pass over the bytes of all of them (google-re2: every
field formed and typed as mnemod writes it, in the first entry's order, which reads back to
itself through `Entry`), and its id unique. The change-log records after
the checkpoint are applied as store.reader applies them: the entries they name are taken from
the checkpoint, replayed, and listed as the replay leaves them. The rows are sorted as
`Engine.select` sorts (created_at, then id): times as mnemod writes them (UTC, milliseconds,
one width) sort as their text.

`committed_rows` answers None when it cannot be sure (an entry not as mnemod writes it, a
duplicate id, a person's L2 edit, a file in another layout): the caller then opens the
namespace, which also says what is wrong with a damaged file.
"""

from __future__ import annotations

import os
from bisect import bisect_left
from collections.abc import Iterable
from itertools import compress, repeat
from operator import and_, gt, itemgetter, not_
from pathlib import Path
from typing import Any

import orjson

from mnemod.domain.model import Entry
from mnemod.errors import CorruptFileError
from mnemod.files.checkpoint_head import head_of, read_head_stat
from mnemod.files.entry_texts import file_identity, span
from mnemod.files.l3_store import entry_slices
from mnemod.files.listing_file import (
    Columns,
    identity,
    listing_path,
    read_listing_text,
    row_line,
)
from mnemod.ids import ID_PATTERN
from mnemod.store.paths import NamespacePaths
from mnemod.store.reader import Unsure, records_after, replayed

# Each field of an entry as mnemod writes it (compact JSON, Entry.to_dict's fields), as the
# listing relies on it: what it prints or sorts on typed and formed as written, the rest typed.
_STR = rb'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"'
_FULL = rb'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})+"'  # not empty
_TIME = rb'"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"'
_STRS = rb"\[(?:" + _STR + rb"(?:," + _STR + rb")*)?\]"
_BOOL = rb"(?:true|false)"
_COUNT = rb"(?:0|[1-9]\d*)"
_VALUES = {
    "id": b'"' + ID_PATTERN.pattern.encode() + b'"',
    "type": _FULL,
    "key": rb"(?:null|" + _FULL + rb")",
    "content": _STR,
    "importance": rb"[1-5]",
    "keywords": _STRS,
    "tags": _STRS,
    "tier": _STR,
    "triggers": _STRS,
    "once": _BOOL,
    "created_at": _TIME,
    "updated_at": _TIME,
    "last_accessed_at": _TIME,
    "access_count": _COUNT,
    "selected_count": _COUNT,
    "expires_at": rb"(?:null|" + _TIME + rb")",
    "promotable": _BOOL,
    "merged_from": _STRS,
    "source": _STR,
    "tokens": _COUNT,
}
_ORDER = itemgetter("created_at", "id")  # Engine.select's order


def committed_rows(
    paths: NamespacePaths, type_: str | None = None, layer: str | None = None
) -> list[tuple[dict[str, Any], str]] | None:
    """(each entry's `to_dict()`, its layer) as committed now, of that type and layer, in
    `Engine.select`'s order; None when this read cannot be sure (see the module doc)."""
    try:
        return _committed_rows(paths, type_, layer)
    except (Unsure, CorruptFileError, OSError, KeyError, TypeError, orjson.JSONDecodeError):
        return None


def _committed_rows(
    paths: NamespacePaths, type_: str | None, layer: str | None
) -> list[tuple[dict[str, Any], str]] | None:
    raw = Path(paths.index).read_bytes()
    head = head_of(raw)
    end = _list_end(raw)
    if head is None or end < 0:
        return None
    records, log, touched = records_after(paths, head)
    items = list(entry_slices(raw, head.entries_at, end))
    if items:
        _check_all(raw, head.entries_at, end, items[0])
        ids = list(map(itemgetter("id"), items))
        if len(set(ids)) != len(ids):
            raise Unsure
    named = [item for item in items if item["id"] in touched] if touched else []
    l3 = [] if layer == "l2" else items
    if touched:
        l3 = [item for item in l3 if item["id"] not in touched]
    if type_ is not None:
        l3 = [item for item in l3 if item["type"] == type_]
    rows = list(zip(l3, repeat("l3")))
    state = replayed(paths, head, named, records, log)
    pools = {"l3": state.entries.values(), "l2": state.l2.values()}
    for name, pool in pools.items():
        if layer in (None, name):
            rows.extend((e.to_dict(), name) for e in _of_type(pool, type_, touched, name))
    keys = list(map(_ORDER, map(itemgetter(0), rows)))
    if any(map(gt, keys, keys[1:])):  # mostly written in that order already
        rows = [rows[i] for i in sorted(range(len(rows)), key=keys.__getitem__)]
    return rows


def listed_text(
    paths: NamespacePaths, type_: str | None = None, layer: str | None = None
) -> bytes | memoryview | None:
    """The lines `committed_rows` gives (as `row_line` makes them), in UTF-8, each ended by
    a newline, read from the listing file of the checkpoint (files.listing_file) and the change-log
    records after it; None when there is no such file of this checkpoint, or this read
    cannot be sure. With nothing to add or take away (no record after the checkpoint, no L2
    entry, no filter), the text is the file's as it is."""
    try:
        return _listed_text(paths, type_, layer)
    except (Unsure, CorruptFileError, OSError, KeyError, TypeError, ValueError):
        return None


def _listed_text(
    paths: NamespacePaths, type_: str | None, layer: str | None
) -> bytes | memoryview | None:
    found = read_head_stat(paths.index)
    if found is None:
        return None
    head, seen = found
    named = identity(head.log_seq, head.last_event_id, head.saved_at, seen)
    text = read_listing_text(listing_path(paths.index), named)
    if text is None:
        return None
    records, log, touched = records_after(paths, head)
    quick = not touched and type_ is None and layer in (None, "l3")
    columns = None if quick else text.parsed()
    if columns is None and not quick:
        return None
    named_l3 = _objects(paths, seen, columns, touched) if columns and touched else []
    state = replayed(paths, head, named_l3, records, log)
    extra: list[tuple[tuple[str, str], str]] = []
    pools = {"l3": state.entries.values(), "l2": state.l2.values()}
    for name, pool in pools.items():
        if layer in (None, name):
            for entry in _of_type(pool, type_, touched, name):
                data = entry.to_dict()
                extra.append(((data["created_at"], data["id"]), row_line(data, name)))
    if quick and not extra:
        return text.text
    columns = columns or text.parsed()
    if columns is None:
        return None
    lines: list[bytes] = []
    keep: list[bool] | None = None  # the rows listed of the checkpoint's, when not all
    if layer in (None, "l3"):
        lines = text.line_bytes()
        if touched or type_ is not None:  # a mask made in C calls, as the rows are many
            masks = [] if type_ is None else [list(map(type_.__eq__, columns.types))]
            if touched:
                masks.append(list(map(not_, map(touched.__contains__, columns.ids))))
            keep = masks[0] if len(masks) == 1 else list(map(and_, *masks))
    out: list[bytes] = []
    done = 0
    rows = range(len(lines))
    for key, line in sorted(extra):  # each where the order puts it among the rows
        at = bisect_left(rows, key, done, key=columns.key)
        out.extend(lines[done:at] if keep is None else compress(lines[done:at], keep[done:at]))
        out.append(line.encode())
        done = at
    out.extend(lines[done:] if keep is None else compress(lines[done:], keep[done:]))
    return b"\n".join(out) + b"\n" if out else b""


def _objects(
    paths: NamespacePaths, seen: os.stat_result, listing: Columns, wanted: set[str]
) -> list[dict[str, Any]]:
    """The checkpoint's objects of the wanted ids, read where the listing says they lie,
    from the checkpoint whose head was read (`seen`), not one written since."""
    found = []
    with Path(paths.index).open("rb") as handle:
        if file_identity(os.fstat(handle.fileno())) != file_identity(seen):
            raise Unsure
        for entry_id, ref in zip(listing.ids, listing.refs, strict=True):
            if entry_id in wanted:
                start, length = span(ref)
                handle.seek(start)
                item = orjson.loads(handle.read(length))
                if type(item) is not dict or item.get("id") != entry_id:
                    raise Unsure
                found.append(item)
    return found


def _list_end(raw: bytes) -> int:
    """Where the entries' list of a checkpoint ends (its `]`), or -1 when the file does not
    end as mnemod writes it (`]}`, then maybe white space)."""
    end = len(raw)
    while end and raw[end - 1 : end].isspace():
        end -= 1
    return end - 2 if raw[end - 2 : end] == b"]}" else -1


def _of_type(pool: Iterable[Entry], type_: str | None, touched: set[str], name: str) -> list[Entry]:
    """The pool's entries of the type: every L2 entry, the L3 ones the records named."""
    return [
        e for e in pool if (type_ is None or e.type == type_) and (name == "l2" or e.id in touched)
    ]


def _fields_of(item: Any) -> tuple[str, ...]:
    """The field names, in order, of an entry as mnemod writes it: the first entry's, when
    it reads back to itself."""
    if type(item) is not dict or Entry.from_dict(item).to_dict() != item:
        raise Unsure
    return tuple(item)


def _check_all(raw: bytes, start: int, end: int, first: Any) -> None:
    """Unsure unless every entry in raw[start:end] is written as mnemod writes one, with the
    fields of the first (`first`, parsed) in its order: one linear-time match of the bytes
    of them all (google-re2; a check of each parsed entry in turn took 0.35 s at 100,000)."""
    fields = _fields_of(first)
    if any(name not in _VALUES for name in fields):
        raise Unsure
    entry = rb"\{" + b",".join(b'"' + n.encode() + b'":' + _VALUES[n] for n in fields) + rb"\}"
    import re2  # google-re2: one linear pass; not loaded by a read of the listing file

    options = re2.Options()
    options.max_mem = 64 << 20  # the DFA's states: more than the default, none left to build
    if not re2.compile(rb"(?:" + entry + rb",)*" + entry, options).fullmatch(raw, start, end):
        raise Unsure
