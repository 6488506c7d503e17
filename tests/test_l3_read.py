"""Reading index.json a slice of entries at a time gives what reading it whole gives, and
any file not laid out as mnemod writes it is read whole, as before."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mnemod.domain.model import Entry
from mnemod.files import l3_store
from mnemod.files.entry_texts import entry_json
from mnemod.files.l3_store import L3Snapshot, load_index, save_index

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def snapshot(count: int) -> L3Snapshot:
    entries = [
        Entry(
            id=f"e{n:05d}",
            type="context",
            content=f'memory {n} with "quotes", {{"id":"x"}} and ,{{"id":"y"',
            created_at=T0 + timedelta(seconds=n),
            updated_at=T0 + timedelta(seconds=n),
            last_accessed_at=T0 + timedelta(seconds=n),
            expires_at=None,
            keywords=("memory", f"w{n % 7}"),
        )
        for n in range(count)
    ]
    return L3Snapshot(entries=entries, log_seq=4, l2=[], stats={"entries": count})


def test_a_sliced_read_equals_a_whole_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "index.json"
    save_index(path, snapshot(500), T0)
    whole = l3_store._snapshot(path, json.loads(path.read_text()))
    monkeypatch.setattr(l3_store._Slices.__init__, "__defaults__", (997, None))  # many slices
    sliced = load_index(path)
    assert sliced.entries == whole.entries and len(sliced.entries) == 500
    assert (sliced.log_seq, sliced.l2, sliced.stats) == (whole.log_seq, whole.l2, whole.stats)


def test_other_layouts_are_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "index.json"
    save_index(path, snapshot(30), T0)
    document = json.loads(path.read_text())
    reordered = {"entries": document.pop("entries"), **document}  # entries first
    path.write_text(json.dumps(reordered, indent=1))
    assert l3_store._streamed(path, path.read_bytes()) is None
    assert load_index(path).entries == snapshot(30).entries
    path.write_text(json.dumps({**document, "entries": reordered["entries"]})[:-1] + ',"x":1}')
    assert l3_store._streamed(path, path.read_bytes()) is None  # entries not last
    assert len(load_index(path).entries) == 30


def test_entries_before_a_last_list_fall_back_to_a_whole_read(tmp_path: Path) -> None:
    path = tmp_path / "index.json"
    save_index(path, snapshot(30), T0)
    document = json.loads(path.read_text())
    entries, l2 = document.pop("entries"), document.pop("l2")
    middle = {**document, "entries": entries, "l2": l2}
    path.write_text(json.dumps(middle, separators=(",", ":")))
    assert path.read_text().endswith("]}")
    assert l3_store._streamed(path, path.read_bytes()) is None
    assert load_index(path).entries == snapshot(30).entries


def test_a_sliced_read_notes_where_each_entry_lies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each entry's reference names exactly its object's bytes, across many slices, even
    with content that looks like the boundary between two entries."""
    path = tmp_path / "index.json"
    save_index(path, snapshot(500), T0)
    monkeypatch.setattr(l3_store._Slices.__init__, "__defaults__", (997, None))
    read = load_index(path)
    raw = path.read_bytes()
    assert len(read.refs) == 500
    for entry in read.entries:
        ref = read.refs[entry.id]
        start, length = ref >> 32, ref & (2**32 - 1)
        assert raw[start : start + length].decode() == entry_json(entry)
