"""The committed L3 and L2 entries as `mnemod list` prints them, without making an Entry of
each: opening the namespace (every entry made, then its lookups) took 4 s at 100,000.

The checkpoint is read once and its entries array parsed a slice at a time
(files.l3_store.entry_slices); each entry stays the dict it was written as (`Entry.to_dict`,
by mnemod), checked only in what the listing prints or sorts on. The change-log records after
the checkpoint are applied as store.reader applies them: the entries they name are taken from
the checkpoint, replayed, and listed as the replay leaves them. The rows are sorted as
`Engine.select` sorts (created_at, then id): times as mnemod writes them (UTC, milliseconds,
one width) sort as their text.

`committed_rows` answers None when it cannot be sure (an entry not as mnemod writes it, a
duplicate id, a person's L2 edit, a file in another layout): the caller then opens the
namespace, which also says what is wrong with a damaged file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from mnemod.domain.model import Entry
from mnemod.errors import CorruptFileError
from mnemod.files.l3_store import entry_slices
from mnemod.ids import ID_PATTERN
from mnemod.store.paths import NamespacePaths
from mnemod.store.reader import Unsure, head_of, records_after, replayed

# an id, a newline, then times as clock.format_time writes them: one match for all of them
# (a match each took 0.5 s at 100,000 entries)
_WRITTEN = re.compile(ID_PATTERN.pattern + r"\n(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)+")


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
    tail = raw.rstrip()
    if head is None or not tail.endswith(b"]}"):
        return None
    records, log, touched = records_after(paths, head)
    rows: list[tuple[dict[str, Any], str]] = []
    named: list[dict[str, Any]] = []  # the entries the records after the checkpoint name
    seen: set[str] = set()
    fields: tuple[str, ...] | None = None
    for item in entry_slices(raw, head.entries_at, len(tail) - 2):
        if fields is None:
            fields = _fields_of(item)
        entry_id = _checked(item, fields)
        if entry_id in seen:
            raise Unsure
        seen.add(entry_id)
        if entry_id in touched:
            named.append(item)
        elif layer != "l2" and (type_ is None or item["type"] == type_):
            rows.append((item, "l3"))
    state = replayed(paths, head, named, records, log)
    pools = {"l3": state.entries.values(), "l2": state.l2.values()}
    for name, pool in pools.items():
        if layer in (None, name):
            rows.extend((e.to_dict(), name) for e in _of_type(pool, type_, touched, name))
    rows.sort(key=lambda row: (row[0]["created_at"], row[0]["id"]))
    return rows


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


def _checked(item: Any, fields: tuple[str, ...]) -> str:
    """The entry's id; Unsure unless what the listing prints or sorts on is as written."""
    if type(item) is not dict or tuple(item) != fields:
        raise Unsure
    entry_id, key, expires = item["id"], item["key"], item["expires_at"]
    created, updated, accessed = item["created_at"], item["updated_at"], item["last_accessed_at"]
    if not (
        type(entry_id) is str
        and type(item["type"]) is str
        and item["type"]
        and type(item["content"]) is str
        and type(item["importance"]) is int
        and 1 <= item["importance"] <= 5
        and type(item["access_count"]) is int
        and (key is None or (type(key) is str and key))
        and type(created) is str
        and type(updated) is str
        and type(accessed) is str
        and (expires is None or type(expires) is str)
        and len(created) == len(updated) == len(accessed) == len(expires or created) == 24
        and _WRITTEN.fullmatch(f"{entry_id}\n{created}{updated}{accessed}{expires or ''}")
    ):
        raise Unsure
    return entry_id
