"""entries.bin: the L3 entries of one checkpoint in marshal's binary form, derived from it
and written beside it, on the same thread, each time a checkpoint is written.

At 100,000 entries reading them from index.json is most of an open (parsing 70 MB of JSON
and checking every field of every entry, some 1.5 s CPU); loaded from this file the same
entries take a fraction of that, so the daemon starts from it when it can.

Layout: a header line (JSON: `FORMAT`, the `identity` of the checkpoint it was derived
from as files.listing_file gives it, the entry count, the byte length of each part and the
BLAKE2b digest of the body), then the body: the records (a marshal list of one tuple per
entry, `Record`'s fields, format 2 so that each record's bytes stand alone and the next
file copies an unchanged entry's bytes), each record's byte length (uint32) and each
entry's reference into the checkpoint (uint64, files.entry_texts.reference).

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

FORMAT = "mnemod.entries/1"
NAME = "entries.bin"
_MARSHAL_VERSION = 2  # no references between objects: a record's bytes stand alone
_LIST_HEAD = b"["  # marshal's list: this, the count as int32, then each item
_LISTS = frozenset({"keywords", "tags", "triggers", "merged_from"})


def cache_path(index: Path) -> Path:
    """The entries cache beside a checkpoint."""
    return index.with_name(NAME)


def record_bytes(raw: Mapping[str, Any]) -> bytes:
    """An entry's record, from its object in a checkpoint (all of `WRITTEN_FIELDS`, as mnemod
    writes one): marshal's bytes of the tuple of its values, lists as tuples."""
    values: list[Any] = []
    for name in WRITTEN_FIELDS:
        value = raw[name]
        values.append(tuple(value) if name in _LISTS else value)
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

    def records(self, batch: int = 512) -> Iterator[Any]:
        """The records loaded, `batch` at a time (one marshal call over each run of them
        as a list): loaded whole, 100,000 records' times and words were all alive at once
        beside the entries made of them, and the holes they left in the heap kept the
        daemon some 150 MB larger."""
        body, offsets = self.body, self.offsets
        for first in range(0, len(offsets) - 1, batch):
            last = min(first + batch, len(offsets) - 1)
            count = (last - first).to_bytes(4, "little", signed=True)
            run = _LIST_HEAD + count + body[offsets[first] : offsets[last]]
            # the digest was checked first: only a file mnemod wrote gets here (module doc)
            yield from marshal.loads(run)  # noqa: S302


def save_cache(path: Path, named: dict[str, Any], records: list[Any], refs: list[int]) -> None:
    """Write the cache of the checkpoint `named` (see files.listing_file.identity):
    `records` (each marshal's bytes, or a view of them) and `refs` in its order."""
    lengths = array("I", map(len, records))
    head = _LIST_HEAD + len(records).to_bytes(4, "little", signed=True)
    tails = [lengths.tobytes(), array("Q", refs).tobytes()]
    digest = hashlib.blake2b(head)
    for part in (*records, *tails):
        digest.update(part)
    header = {
        "format": FORMAT,
        **named,
        "count": len(records),
        "records": len(head) + sum(lengths),
        "blake2b": digest.hexdigest(),
    }
    atomic_write_chunks(path, _chunks(orjson.dumps(header) + b"\n" + head, records, tails))


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
    try:
        raw = path.read_bytes()
        cut = raw.index(b"\n")
        header = orjson.loads(raw[:cut])
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            return None
        if any(header.get(k) != v for k, v in named.items()):
            return None
        count, size = header.get("count"), header.get("records")
        if type(count) is not int or type(size) is not int or count < 0:
            return None
        body = memoryview(raw)[cut + 1 :]
        if len(body) != size + 12 * count:
            return None
        if header.get("blake2b") != hashlib.blake2b(body).hexdigest():
            return None
    except (OSError, ValueError):  # orjson's decode error is a ValueError
        return None
    lengths, refs = array("I"), array("Q")
    lengths.frombytes(body[size : size + 4 * count])
    refs.frombytes(body[size + 4 * count :])
    offsets = list(accumulate(lengths, initial=len(_LIST_HEAD) + 4))
    if offsets[-1] != size or body[:5] != _LIST_HEAD + count.to_bytes(4, "little", signed=True):
        return None
    return Cached(body, offsets, refs)


def read_records(path: Path, named: dict[str, Any]) -> tuple[Iterator[Any], Sequence[int]] | None:
    """The records of the cache of `named`, loaded as they are iterated (ValueError,
    EOFError or TypeError when one does not load), and each entry's reference; or None."""
    cached = read_cache(path, named)
    return None if cached is None else (cached.records(), cached.refs)


def entry_args(records: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
    """Each record as Entry's positional arguments. Equal times share one datetime and
    words are interned, as the checkpoint's reader does (models.Entry.from_dict); marshal's
    format 2 keeps no string interned."""
    parse, intern = datetime.fromisoformat, sys.intern
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
            entry_id, intern(kind), content, created, updated, accessed, expires,
            key or None, importance, tuple(map(intern, keywords)) if keywords else (),
            tuple(map(intern, tags)) if tags else (), intern(tier), triggers, once,
            accesses, selected, promotable, merged, source, tokens,
        )  # fmt: skip
