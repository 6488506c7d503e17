"""The listing file written beside each checkpoint (files.listing_file): `list` read from it
prints what the read of the checkpoint prints, and any listing that is not of the current
checkpoint, or not whole, sends `list` back to that read."""

from __future__ import annotations

import os
import shutil
from datetime import timedelta
from pathlib import Path

import pytest

import mnemod
from helpers import run_cli
from mnemod.clock import FixedClock
from mnemod.files.listing_file import listing_path, row_line
from mnemod.store.listing import committed_rows, listed_lines
from mnemod.store.paths import NamespacePaths
from test_reader import FILTERS, T0, busy_store

ODD = 'Tabs\there, a new\nline, a \\ backslash, "quotes", \r and ünïcødé ✓ 𝄞 \u2028 end'


def reference(paths: NamespacePaths, type_: str | None, layer: str | None) -> list[str]:
    """The lines as the read of the checkpoint gives them."""
    rows = committed_rows(paths, type_, layer)
    assert rows is not None
    return [row_line(data, layer) for data, layer in rows]


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
            quick = listed_lines(paths, type_, layer)
            assert quick is not None
            assert quick == reference(paths, type_, layer)
    finally:
        store.close()
    for type_, layer in FILTERS:  # the closing checkpoint's, written from the rows kept
        assert listed_lines(paths, type_, layer) == reference(paths, type_, layer)
    again = mnemod.open(tmp_path, clock=clock)  # the first checkpoint after an open
    again.add("After reopening", type="context")
    again.engine.checkpoint()
    assert listed_lines(paths) == reference(paths, None, None)
    again.close()


@pytest.mark.process  # runs the command as a user does
def test_list_prints_the_same_from_the_listing_file_and_without_it(tmp_path: Path) -> None:
    store = odd_store(tmp_path, FixedClock(T0))
    listing = listing_path(store.engine.paths.index)
    flags = [[], ["--type", "insight"], ["--layer", "l2"], ["--layer", "l3"], ["--json"]]
    try:
        assert listed_lines(store.engine.paths) is not None
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
    assert listed_lines(paths) is not None
    store.close()
    good = listing.read_bytes()
    shutil.copy(older, listing)  # as a crash between the checkpoint and its listing leaves it
    assert listed_lines(paths) is None
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
        assert listed_lines(paths) is None
    listing.unlink()
    assert listed_lines(paths) is None
    listing.write_bytes(good)
    assert listed_lines(paths) == reference(paths, None, None)
    seen = paths.index.stat()  # the checkpoint changed in place (its time): not the one listed
    os.utime(paths.index, ns=(seen.st_atime_ns, seen.st_mtime_ns + 1_000_000))
    assert listed_lines(paths) is None
