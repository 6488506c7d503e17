"""entries.bin: the L3 entries of one checkpoint in marshal's binary form, derived from it
and written beside it, on the same thread, each time a checkpoint is written.

At 100,000 entries reading them from index.json is most of an open (parsing 70 MB of JSON
and checking every field of every entry, some 1.5 s CPU); loaded from this file the same
entries take a fraction of that, so the daemon starts from it when it can.

Layout: a header line (JSON: `FORMAT`, the `identity` of the checkpoint it was derived
from as files.listing_file gives it, the entry count, the byte length of each part and the
BLAKE2b digest of the body), then the body: the records (one marshal dump per entry of
the tuple of its fields in `WRITTEN_FIELDS`' order, each standing alone, so the next file
copies an unchanged entry's bytes), each record's byte length (uint32) and each entry's
reference into the checkpoint (uint64, files.entry_texts.reference).

It is derived, never the truth: a reader that finds it missing, of another checkpoint, or
damaged (the digest is checked before marshal sees a byte) reads index.json instead. The
records are made from the very bytes the checkpoint is written from (a changed entry's
text, an unchanged one's bytes in the file it refers into, or its record in the cache of
that file), never from the entries themselves, which the engine goes on changing while a
checkpoint is written on another thread. Trust: marshal is not safe against crafted
input; whoever can write this file can write index.json beside it, which mnemod reads as
the truth all the same (docs/design.md).
"""

from __future__ import annotations

import hashlib
import marshal
import sys
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from itertools import accumulate
from pathlib import Path
from typing import Any

import orjson

from mnemod.domain.model import WRITTEN_FIELDS
from mnemod.files.atomic import atomic_write_chunks
from mnemod.files.listing_file import read_derived

FORMAT = "mnemod.entries/1"
NAME = "entries.bin"
_MARSHAL_VERSION = 4  # keeps strings interned; each record is its own marshal call
_WORDS = frozenset({"keywords", "tags"})  # held once for every entry (interned)
_LISTS = frozenset({"triggers", "merged_from"})
_INTERNED = frozenset({"type", "tier"})


def cache_path(index: Path) -> Path:
    """The entries cache beside a checkpoint."""
    return index.with_name(NAME)


def record_bytes(raw: Mapping[str, Any]) -> bytes:
    """An entry's record, from its object in a checkpoint (all of `WRITTEN_FIELDS`, as mnemod
    writes one): marshal's bytes of the tuple of its values, lists as tuples."""
    values: list[Any] = []
    for name in WRITTEN_FIELDS:
        value = raw[name]
        if name in _WORDS:
            value = tuple(map(sys.intern, value))
        elif name in _LISTS:
            value = tuple(value)
        elif name in _INTERNED:
            value = sys.intern(value)
        values.append(value)
    return marshal.dumps(tuple(values), _MARSHAL_VERSION)


@dataclass(frozen=True)
class Cached:
    """A cache's records (each as marshal's bytes, in the checkpoint's order) and each
    entry's reference into that checkpoint."""

    body: memoryview
    offsets: list[int]  # where each record starts in body; one more: where they end
    refs: Sequence[int]

    def by_ref(self) -> dict[int, memoryview]:
        """Each record's bytes by the entry's reference into the checkpoint."""
        body, offsets = self.body, self.offsets
        return {ref: body[offsets[at] : offsets[at + 1]] for at, ref in enumerate(self.refs)}

    def records(self) -> Iterator[Any]:
        """The records loaded as they are iterated, one marshal call each (C calls
        throughout): loaded as one list, 100,000 records' times were all alive at once
        beside the entries made of them, and the holes they left in the heap kept the
        daemon some 150 MB larger."""
        body, offsets = self.body, self.offsets
        slices = map(slice, offsets[:-1], offsets[1:])
        # the digest was checked first: only a file mnemod wrote gets here (module doc)
        return map(marshal.loads, map(body.__getitem__, slices))


def save_cache(path: Path, named: dict[str, Any], records: list[Any], refs: list[int]) -> None:
    """Write the cache of the checkpoint `named` (see files.listing_file.identity):
    `records` (each marshal's bytes, or a view of them) and `refs` in its order."""
    lengths = array("I", map(len, records))
    tails = [lengths.tobytes(), array("Q", refs).tobytes()]
    digest = hashlib.blake2b()
    for part in (*records, *tails):
        digest.update(part)
    header = {
        "format": FORMAT,
        **named,
        "count": len(records),
        "records": sum(lengths),
        "blake2b": digest.hexdigest(),
    }
    atomic_write_chunks(path, _chunks(orjson.dumps(header) + b"\n", records, tails))


def _chunks(first: bytes, records: list[Any], tails: list[bytes]) -> Iterator[bytes]:
    """The file in pieces of about a megabyte."""
    yield first
    batch: list[Any] = []
    size = 0
    for record in records:
        batch.append(record)
        size += len(record)
        if size >= 1 << 20:
            yield b"".join(batch)
            batch, size = [], 0
    yield b"".join(batch)
    yield from tails


def read_cache(path: Path, named: dict[str, Any]) -> Cached | None:
    """The cache at `path` when it is of the checkpoint `named` and whole; None otherwise
    (missing, of another checkpoint, damaged)."""
    found = read_derived(path, FORMAT, named)
    if found is None:
        return None
    header, raw, cut = found
    count, size = header.get("count"), header.get("records")
    if type(count) is not int or type(size) is not int or count < 0:
        return None
    body = memoryview(raw)[cut + 1 :]
    if len(body) != size + 12 * count:
        return None
    if header.get("blake2b") != hashlib.blake2b(body).hexdigest():
        return None
    lengths, refs = array("I"), array("Q")
    lengths.frombytes(body[size : size + 4 * count])
    refs.frombytes(body[size + 4 * count :])
    offsets = list(accumulate(lengths, initial=0))
    if offsets[-1] != size:
        return None
    return Cached(body, offsets, refs)


def read_records(path: Path, named: dict[str, Any]) -> tuple[Iterator[Any], Sequence[int]] | None:
    """The records of the cache of `named`, loaded as they are iterated (ValueError,
    EOFError or TypeError when one does not load), and each entry's reference; or None."""
    cached = read_cache(path, named)
    return None if cached is None else (cached.records(), cached.refs)


def entry_args(records: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
    """Each record as Entry's positional arguments. Equal times share one datetime and
    words are interned (marshal keeps a string interned), as the checkpoint's reader
    does (models.Entry.from_dict)."""
    parse = datetime.fromisoformat
    for record in records:
        (entry_id, kind, key, content, importance, keywords, tags, tier, triggers, once,
         created_text, updated_text, accessed_text, accesses, selected, expires_text,
         promotable, merged, source, tokens) = record  # fmt: skip
        created = parse(created_text)
        updated = created if updated_text == created_text else parse(updated_text)
        if accessed_text == created_text:
            accessed = created
        elif accessed_text == updated_text:
            accessed = updated
        else:
            accessed = parse(accessed_text)
        if expires_text is None:
            expires = None
        elif expires_text == accessed_text:
            expires = accessed
        else:
            expires = parse(expires_text)
        yield (
            entry_id, kind, content, created, updated, accessed, expires, key or None,
            importance, keywords, tags, tier, triggers, once, accesses, selected,
            promotable, merged, source, tokens,
        )  # fmt: skip
