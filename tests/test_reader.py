"""Quick reads of what is committed (store.reader): the same answers as reading every entry,
and None (read everything) whenever they cannot be sure."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import mnemod
from mnemod.clock import FixedClock
from mnemod.config import load_config
from mnemod.files.checkpoint_head import read_head
from mnemod.store import reader
from mnemod.store.engine import Engine
from mnemod.store.listing import committed_rows
from mnemod.store.paths import NamespacePaths
from mnemod.store.reader import committed_entry, committed_stats

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def full_read(folder: Path) -> Engine:
    return Engine(NamespacePaths(folder, "default"), load_config(None), FixedClock(T0),
                  readonly=True)  # fmt: skip


def busy_store(folder: Path, clock: FixedClock) -> mnemod.Store:
    """A store with L2 and L3 entries, a checkpoint, and records after it."""
    store = mnemod.open(folder, clock=clock)
    texts = ["The cat is named Miso", "Deploys are on Tuesday", "The VPN is wg0",
             "Lunch is at noon", "The printer is on floor 2", "Backups run at 3am"]  # fmt: skip
    made = [store.add(text, type="insight" if n % 2 else "context") for n, text in enumerate(texts)]
    store.promote(made[0].id)
    store.engine.checkpoint()
    clock.advance(timedelta(minutes=5))
    store.update(made[1].id, content="Deploys are on Thursday now", importance=5)
    store.remove(made[2].id)
    store.access(made[3].id)
    store.promote(made[4].id)
    store.add("A relation made after the checkpoint", type="relation")
    return store


@pytest.mark.parametrize("few", [100, 0])  # the entries looked for one by one, or in a pass
def test_stats_and_entries_after_a_checkpoint_equal_a_full_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, few: int
) -> None:
    monkeypatch.setattr(reader, "_FEW_IDS", few)
    store = busy_store(tmp_path, FixedClock(T0))
    paths = store.engine.paths
    assert store.engine.committed_seq > 0
    engine = full_read(tmp_path)
    try:
        quick = committed_stats(paths)
        assert quick == (engine.stats(), engine.last_event_id)
        head = read_head(paths.index)
        assert head is not None
        assert len(reader.records_after(paths, head)[2]) == 5  # the entries busy_store touched
        assert committed_stats(paths, most=4) is None
        assert committed_stats(paths, most=5) == quick
        for entry_id in [*engine.entries, *engine.l2_entries]:
            found = engine.find(entry_id)
            assert found is not None
            assert committed_entry(paths, entry_id) == (found, engine.layer_of(found))
        assert committed_entry(paths, "not-an-id-here") is None
    finally:
        engine.close()
        store.close()
    again = full_read(tmp_path)  # after the closing checkpoint: from its head alone
    assert committed_stats(paths) == (again.stats(), again.last_event_id)
    assert committed_stats(paths, most=0) == (again.stats(), again.last_event_id)
    again.close()


def test_a_persons_l2_edit_or_an_older_checkpoint_sends_the_caller_to_a_full_read(
    tmp_path: Path,
) -> None:
    store = busy_store(tmp_path, FixedClock(T0))
    paths = store.engine.paths
    l2 = next(paths.l2_dir.glob("*.md"))
    store.close()
    assert committed_stats(paths) is not None and committed_rows(paths) is not None
    l2.write_text(l2.read_text().replace("Miso", "Mochi"))
    assert committed_stats(paths) is None
    assert committed_rows(paths) is None
    assert all(committed_entry(paths, e) is None for e in full_read(tmp_path).entries)

    other = tmp_path / "older"
    store = mnemod.open(other, clock=FixedClock(T0))
    store.add("An entry of a store whose checkpoint lacks the newer stats")
    store.close()
    index = NamespacePaths(other, "default").index
    index.write_text(index.read_text().replace('"promotable":0,', "", 1))
    assert committed_stats(NamespacePaths(other, "default")) is None


def test_a_log_with_nothing_after_the_checkpoint_is_not_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = busy_store(tmp_path, FixedClock(T0))
    paths = store.engine.paths
    store.close()  # its checkpoint holds the log's last record
    engine = full_read(tmp_path)
    expected = engine.stats(), engine.last_event_id
    entries = {i: (e, engine.layer_of(e)) for i, e in [*engine.entries.items(),
               *engine.l2_entries.items()]}  # fmt: skip
    engine.close()
    segment = max(paths.log_dir.glob("*.jsonl"))
    whole = segment.read_bytes()
    head = read_head(paths.index)
    assert head is not None and reader.none_after(paths.log_dir, head.log_seq)

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("the change log was opened")

    with monkeypatch.context() as patched:
        patched.setattr(reader, "ChangeLog", refused)
        assert committed_stats(paths) == expected
        assert all(committed_entry(paths, i) == found for i, found in entries.items())
    segment.write_bytes(whole + b'{"seq":999,"torn')  # a record cut mid-append: not committed
    assert not reader.none_after(paths.log_dir, 998)
    assert committed_stats(paths) == expected
    segment.write_bytes(whole + b'{"seq":999,"at":"no crc"}\n')  # damaged: not committed
    assert not reader.none_after(paths.log_dir, 998)
    assert committed_stats(paths) == expected
    segment.write_bytes(whole + b'{"seq":3,"at":"no crc"}\n')  # the last line is read as is
    assert reader.none_after(paths.log_dir, head.log_seq)


FILTERS = [(None, None), ("insight", None), ("context", None), (None, "l2"), (None, "l3"),
           ("insight", "l2"), ("relation", "l3"), ("nothing", None)]  # fmt: skip


def listed(engine: Engine, type_: str | None, layer: str | None) -> list[tuple[Any, str]]:
    """What `mnemod list` prints from the opened namespace: (to_dict, layer), in order."""
    return [(e.to_dict(), engine.layer_of(e)) for e in engine.select(type_, layer)]


def test_the_listing_after_a_checkpoint_equals_a_full_read(tmp_path: Path) -> None:
    clock = FixedClock(T0)
    store = busy_store(tmp_path, clock)
    store.add("The wiki lives at wiki.example", type="context", key="wiki")
    store.update(store.engine.find("wiki").id, importance=2)  # type: ignore[union-attr]
    paths = store.engine.paths
    assert store.engine.committed_seq > 0  # records after the checkpoint, to be applied
    engine = full_read(tmp_path)
    try:
        for type_, layer in FILTERS:
            assert committed_rows(paths, type_, layer) == listed(engine, type_, layer)
        every = committed_rows(paths)
        assert every is not None and {layer for _, layer in every} == {"l2", "l3"}
    finally:
        engine.close()
        store.close()
    again = full_read(tmp_path)  # after the closing checkpoint: no record after it
    assert committed_rows(paths) == listed(again, None, None)
    again.close()


def test_an_entry_not_as_mnemod_writes_it_sends_the_listing_to_a_full_read(
    tmp_path: Path,
) -> None:
    store = busy_store(tmp_path, FixedClock(T0))
    paths = store.engine.paths
    store.close()
    assert committed_rows(paths) is not None
    text = paths.index.read_text()
    stamp = text.rsplit('"created_at":"', 1)[1].split('"', 1)[0]  # the last L3 entry's
    paths.index.write_text(text[::-1].replace(stamp[::-1], stamp[:-5][::-1] + "Z", 1)[::-1])
    assert committed_rows(paths) is None  # the same time, written without milliseconds
    full_read(tmp_path).close()  # which the full read takes


@pytest.mark.parametrize(
    ("written", "edited"),
    [
        ('"importance":3', '"importance":"3"'),  # a number as text
        ('"tokens":', '"extra":1,"tokens":'),  # a field mnemod does not write
        ('"key":null', '"key":""'),  # an empty key label
        ('"once":false', '"once":0'),
        ('"tags":[]', '"tags":[1]'),
        ('"content":"', '"content":"\\ud800'),  # a lone surrogate: not text
    ],
)
def test_an_entry_after_the_first_edited_in_valid_json_sends_the_listing_to_a_full_read(
    tmp_path: Path, written: str, edited: str
) -> None:
    """The listing checks every entry's bytes, not only the first entry's fields."""
    store = busy_store(tmp_path, FixedClock(T0))
    paths = store.engine.paths
    store.close()
    assert committed_rows(paths) is not None
    head, last = paths.index.read_text().rsplit('{"id":', 1)
    assert written in last
    paths.index.write_text(head + '{"id":' + last.replace(written, edited, 1))
    assert committed_rows(paths) is None


def test_a_duplicate_id_sends_the_listing_to_a_full_read(tmp_path: Path) -> None:
    store = busy_store(tmp_path, FixedClock(T0))
    paths = store.engine.paths
    store.close()
    head, last = paths.index.read_text().rsplit('{"id":', 1)
    entry = '{"id":' + last[: last.rindex("]}")]
    paths.index.write_text(head + entry + "," + entry + "]}\n")
    assert committed_rows(paths) is None
