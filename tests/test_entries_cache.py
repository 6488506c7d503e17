"""The entries cache beside each checkpoint (files.entries_cache): an open from it reads the
same entries as the read of index.json, and any cache that is not exactly of the current
checkpoint, or not whole, sends the open back to index.json."""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

import mnemod
from mnemod.clock import FixedClock
from mnemod.files import l3_store
from mnemod.files.entries_cache import cache_path
from mnemod.files.l3_store import L3Snapshot, load_index
from test_listing_file import odd_store
from test_reader import T0


def from_json(index: Path) -> L3Snapshot:
    """The checkpoint read from index.json alone."""
    raw = index.read_bytes()
    snapshot = l3_store._streamed(index, raw)
    assert snapshot is not None
    return snapshot


def from_cache(index: Path) -> L3Snapshot | None:
    return l3_store._cached(index)


def same(a: L3Snapshot, b: L3Snapshot) -> None:
    assert a.entries == b.entries
    assert a.refs == b.refs
    assert (a.l2, a.stats, a.log_seq, a.last_event_id, a.l2_written) == (
        b.l2,
        b.stats,
        b.log_seq,
        b.last_event_id,
        b.l2_written,
    )


def closed_store(folder: Path) -> Path:
    """odd_store closed (a last checkpoint over one before it); its index.json."""
    store = odd_store(folder, FixedClock(T0))
    index = store.engine.paths.index
    store.close()
    return index


def test_the_cache_holds_the_checkpoints_entries(tmp_path: Path) -> None:
    index = closed_store(tmp_path)
    assert cache_path(index).exists()
    cached = from_cache(index)
    assert cached is not None
    same(cached, from_json(index))
    loaded = load_index(index)
    same(loaded, cached)
    # words are held once, as the JSON reader holds them
    left, right = loaded.entries[0], from_json(index).entries[0]
    assert all(a is b for a, b in zip(left.keywords, right.keywords, strict=True))


def test_a_missing_stale_or_foreign_cache_falls_back_to_the_json(tmp_path: Path) -> None:
    clock = FixedClock(T0)
    store = odd_store(tmp_path / "a", clock)
    index = store.engine.paths.index
    old = tmp_path / "old.bin"
    shutil.copy(cache_path(index), old)
    clock.advance(timedelta(minutes=1))
    store.add("One more after the copy", type="context")
    store.close()
    truth = from_json(index)
    shutil.copy(old, cache_path(index))  # of the checkpoint before
    assert from_cache(index) is None
    same(load_index(index), truth)
    other = closed_store(tmp_path / "b")
    shutil.copy(cache_path(other), cache_path(index))  # of another store
    assert from_cache(index) is None
    cache_path(index).unlink()
    assert from_cache(index) is None
    same(load_index(index), truth)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_a_truncated_or_bit_flipped_cache_falls_back_to_the_json(
    tmp_path_factory: object, data: st.DataObject
) -> None:
    folder = Path(getattr(tmp_path_factory, "mktemp")("store"))  # noqa: B009
    index = closed_store(folder)
    truth = from_json(index)
    blob = cache_path(index).read_bytes()
    if data.draw(st.booleans(), "truncate"):
        damaged = blob[: data.draw(st.integers(0, len(blob) - 1), "keep")]
    else:
        at = data.draw(st.integers(0, len(blob) - 1), "byte")
        bit = data.draw(st.integers(0, 7), "bit")
        damaged = blob[:at] + bytes([blob[at] ^ (1 << bit)]) + blob[at + 1 :]
    cache_path(index).write_bytes(damaged)
    cached = from_cache(index)
    if cached is not None:  # a flip in the header's JSON that leaves it the same
        same(cached, truth)
    same(load_index(index), truth)


def test_a_checkpoint_written_while_entries_change_has_an_exact_cache(tmp_path: Path) -> None:
    """The engine changes entries in place while a checkpoint of them is written on
    another thread; the cache is made from the bytes written, not from the entries."""
    clock = FixedClock(T0)
    store = odd_store(tmp_path, clock)
    store.engine.checkpoint(force=True)  # the next one's references have a cache to copy
    changed = list(store.engine.state.entries)[:3]  # L3 entries
    store.update(changed[0], importance=4)
    job = store.engine.checkpoint_job()
    assert job is not None
    clock.advance(timedelta(minutes=1))
    for entry_id in changed:  # after the snapshot, before its write
        store.access(entry_id)
        store.update(entry_id, importance=1)
    job()
    index = store.engine.paths.index
    cached = from_cache(index)
    assert cached is not None
    same(cached, from_json(index))
    store.close()
    same(load_index(index), from_json(index))


def test_a_store_opens_from_its_cache_with_what_it_held(tmp_path: Path) -> None:
    store = odd_store(tmp_path, FixedClock(T0))
    before = {entry.id: entry for entry in store.list()}
    store.close()
    again = mnemod.open(tmp_path, clock=FixedClock(T0))
    try:
        assert {entry.id: entry for entry in again.list()} == before
    finally:
        again.close()
