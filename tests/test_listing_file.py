"""The listing file written beside each checkpoint (files.listing_file): `list` read from it
prints what the read of the checkpoint prints, and any listing that is not of the current
checkpoint, or not whole, sends `list` back to that read."""

from __future__ import annotations

import json
import os
import shutil
import zlib
from datetime import timedelta
from pathlib import Path

import pytest

import mnemod
from helpers import run_cli
from mnemod.clock import FixedClock
from mnemod.files.checkpoint_head import read_head_stat
from mnemod.files.listing_file import FORMAT, identity, listing_path, read_listing_text, row_line
from mnemod.store.listing import committed_rows, listed_text
from mnemod.store.paths import NamespacePaths
from test_reader import FILTERS, T0, busy_store

ODD = 'Tabs\there, a new\nline, a \\ backslash, "quotes", \r and ünïcødé ✓ 𝄞 \u2028 end'


def reference(paths: NamespacePaths, type_: str | None, layer: str | None) -> bytes:
    """The lines as the read of the checkpoint gives them, in UTF-8, each ended by a
    newline."""
    rows = committed_rows(paths, type_, layer)
    assert rows is not None
    return "".join(row_line(data, layer) + "\n" for data, layer in rows).encode()


def odd_store(folder: Path, clock: FixedClock) -> mnemod.Store:
    """busy_store, with odd texts checkpointed and, after the checkpoint, a merge."""
    store = busy_store(folder, clock)
    store.add(ODD, type="context", key="odd\tkey")
    store.add(ODD[:40] + "x" * 90, type="insight")
    store.engine.checkpoint()
    clock.advance(timedelta(minutes=1))
    store.add("The cat is named Miso and she is grey", type="context")  # may merge
    store.add("Backups run at 3am every night", type="insight")  # a near duplicate: merged
    store.add("Another one after the second checkpoint\twith a tab", type="relation")
    store.update(store.engine.find("odd\tkey").id, importance=1)  # type: ignore[union-attr]
    return store


def test_the_listing_file_lists_what_the_checkpoint_lists(tmp_path: Path) -> None:
    clock = FixedClock(T0)
    store = odd_store(tmp_path, clock)
    paths = store.engine.paths
    assert listing_path(paths.index).exists()
    assert store.engine.committed_seq > 0  # records after the checkpoint
    try:
        for type_, layer in FILTERS:
            quick = listed_text(paths, type_, layer)
            assert quick is not None
            assert quick == reference(paths, type_, layer)
    finally:
        store.close()
    for type_, layer in FILTERS:  # the closing checkpoint's, written from the rows kept
        assert listed_text(paths, type_, layer) == reference(paths, type_, layer)
    again = mnemod.open(tmp_path, clock=clock)  # the first checkpoint after an open
    again.add("After reopening", type="context")
    again.engine.checkpoint()
    assert listed_text(paths) == reference(paths, None, None)
    again.close()


@pytest.mark.process  # runs the command as a user does
def test_list_prints_the_same_from_the_listing_file_and_without_it(tmp_path: Path) -> None:
    store = odd_store(tmp_path, FixedClock(T0))
    listing = listing_path(store.engine.paths.index)
    flags = [[], ["--type", "insight"], ["--layer", "l2"], ["--layer", "l3"], ["--json"]]
    try:
        assert listed_text(store.engine.paths) is not None
        quick = [run_cli(tmp_path, "list", *f).stdout for f in flags]
        listing.unlink()  # a store written before the file
        assert [run_cli(tmp_path, "list", *f).stdout for f in flags] == quick
        assert "Thursday" in quick[0] and "[odd\tkey]" in quick[0]
    finally:
        store.close()


def test_a_stale_damaged_or_missing_listing_is_not_used(tmp_path: Path) -> None:
    clock = FixedClock(T0)
    store = odd_store(tmp_path, clock)
    paths = store.engine.paths
    listing = listing_path(paths.index)
    older = tmp_path / "older-listing"
    shutil.copy(listing, older)
    clock.advance(timedelta(seconds=1))
    store.engine.checkpoint(force=True)  # the same log_seq: another saved_at
    assert listed_text(paths) is not None
    store.close()
    good = listing.read_bytes()
    shutil.copy(older, listing)  # as a crash between the checkpoint and its listing leaves it
    assert listed_text(paths) is None
    cut = good.index(b"\n") + 1
    header, body = good[:cut], good[cut:]
    for damaged in (
        header + body.replace(b"imp=", b"imq=", 1),  # the checksum does not hold
        header + body[: len(body) // 2],  # cut short
        header,  # no body
        b"not json\n" + body,
        body,
    ):
        listing.write_bytes(damaged)
        assert listed_text(paths) is None
    listing.unlink()
    assert listed_text(paths) is None
    listing.write_bytes(good)
    assert listed_text(paths) == reference(paths, None, None)
    seen = paths.index.stat()  # the checkpoint changed in place (its time): not the one listed
    os.utime(paths.index, ns=(seen.st_atime_ns, seen.st_mtime_ns + 1_000_000))
    assert listed_text(paths) is None


def test_with_nothing_to_add_the_lines_are_the_listings_text(tmp_path: Path) -> None:
    store = mnemod.open(tmp_path, clock=FixedClock(T0))
    for n, text in enumerate([ODD, "The VPN is wg0", "Lunch is at noon", "Backups at 3am"]):
        store.add(text, type="context", key=f"k{n}")
    paths = store.engine.paths
    store.close()  # its closing checkpoint: no record after it, no L2 entry
    index = paths.index
    found = read_head_stat(index)
    assert found is not None
    head, seen = found
    named = identity(head.log_seq, head.last_event_id, head.saved_at, seen)
    written = read_listing_text(listing_path(index), named)
    assert written is not None and written.count == 4
    assert listed_text(paths) == written.text == reference(paths, None, None)
    assert listed_text(paths, "context") == written.text  # a filter: the columns read too
    listing = listing_path(index)
    good = listing.read_bytes()
    listing.write_bytes(good.replace(FORMAT.encode(), b"mnemod.listing/1", 1))
    assert listed_text(paths) is None  # a file of an older layout: the checkpoint is read


def test_a_text_of_more_lines_than_rows_is_not_used(tmp_path: Path) -> None:
    """A listing whose checksum holds but whose text does not have a line for each row
    (never written so: a key or a type is one line, a text's newlines are spaces)."""
    store = mnemod.open(tmp_path, clock=FixedClock(T0))
    store.add("The VPN is wg0", type="context")
    store.add("Lunch is at noon", type="context")
    paths = store.engine.paths
    store.close()
    listing = listing_path(paths.index)
    cut = listing.read_bytes().index(b"\n")
    header = json.loads(listing.read_bytes()[:cut])
    body = listing.read_bytes()[cut + 1 :]
    text, columns = body[: header["text_bytes"]], body[header["text_bytes"] :]
    assert listed_text(paths) == text
    split = text.replace(b"wg0", b"wg\n0", 1)
    header.update(text_bytes=len(split), crc32=zlib.crc32(split + columns))
    listing.write_bytes(json.dumps(header).encode() + b"\n" + split + columns)
    assert listed_text(paths) is None
    assert b"wg0" in reference(paths, None, None)  # the checkpoint's read, which `list` makes
