"""A checkpoint copies the entries that did not change from the file they were read from,
and the file it writes reads back to exactly the entries held, however they came."""

from __future__ import annotations

import json
import os
from pathlib import Path

import mnemod
from mnemod.files.entry_texts import entry_json
from mnemod.files.l3_store import load_index


def stored(tmp_path: Path, count: int) -> list[str]:
    store = mnemod.open(tmp_path)
    with store.engine.batch():
        ids = [store.add(f"fact {n}: word{n} other{n}", type="context").id for n in range(count)]
    store.close()
    return ids


def entries_on_disk(index: Path) -> list[str]:
    return [entry_json(e) for e in load_index(index).entries]


def test_unchanged_entries_are_copied_and_changed_ones_written_anew(tmp_path: Path) -> None:
    ids = stored(tmp_path, 50)
    store = mnemod.open(tmp_path)
    engine = store.engine
    assert engine.texts.referenced == 50 and not engine.texts.cold
    store.update(ids[3], content="fact 3, changed")
    store.remove(ids[10])
    added = store.add("a new fact at the end", type="context")
    engine.checkpoint()
    held = [entry_json(e) for e in engine.entries.values()]
    assert entries_on_disk(engine.paths.index) == held
    assert engine.texts.referenced == 50  # now all into the new file
    store.update(ids[4], content="fact 4, changed after the checkpoint")
    store.close()
    again = mnemod.open(tmp_path)
    assert again.get(ids[4]).content == "fact 4, changed after the checkpoint"
    assert again.get(added.id).content == "a new fact at the end"
    assert ids[10] not in again.engine.entries
    assert [entry_json(e) for e in again.engine.entries.values()] == entries_on_disk(
        again.engine.paths.index
    )
    again.close()


def test_a_file_changed_in_place_is_not_copied_from(tmp_path: Path) -> None:
    ids = stored(tmp_path, 20)
    store = mnemod.open(tmp_path)
    engine = store.engine
    index = engine.paths.index
    at = index.read_bytes().index(b'"content":"fact 5:') + len('"content":"fact ')
    with index.open("r+b") as handle:  # a person's editor writing into the same file
        handle.seek(at)
        handle.write(b"X")
    os.utime(index, ns=(1, 1))
    store.update(ids[0], content="changed")
    engine.checkpoint()
    assert entries_on_disk(index) == [entry_json(e) for e in engine.entries.values()]
    store.close()


def test_entries_with_other_fields_are_serialized_anew(tmp_path: Path) -> None:
    ids = stored(tmp_path, 10)
    index = tmp_path / "default" / "l3" / "index.json"
    document = json.loads(index.read_text())
    document["entries"][2]["note"] = {"id": "not an entry"}  # a field mnemod does not write
    index.write_text(json.dumps(document, ensure_ascii=False, separators=(",", ":")))
    store = mnemod.open(tmp_path)
    assert store.engine.texts.referenced == 0  # the slice holding it: all ten are serialized
    assert store.engine.texts.cold
    store.update(ids[5], content="changed")
    store.engine.checkpoint()
    written = json.loads(index.read_text())["entries"]
    assert "note" not in written[2] and len(written) == 10
    store.close()
