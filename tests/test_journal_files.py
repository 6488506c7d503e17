"""The journal files' tails: read back to front, torn lines cut however long, and the last
commit's lines counted (a kill -9 can leave only the first of them)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from mnemod.files.atomic import ensure_whole_lines, lines_backward
from mnemod.files.journal import JournalFiles, last_commit, read_jsonl


def test_lines_read_backward_across_chunks_are_the_lines_reversed(tmp_path: Path) -> None:
    rng = random.Random(3)
    lines = [b"x" * rng.choice([0, 1, 10, 70_000, 140_000]) + b"|%d" % n for n in range(40)]
    path = tmp_path / "f"
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert list(lines_backward(path)) == lines[::-1]
    path.write_bytes(b"\n".join(lines))  # no newline at the end
    assert list(lines_backward(path)) == lines[::-1]
    assert list(lines_backward(tmp_path / "missing")) == []


def test_a_torn_line_longer_than_a_chunk_is_cut(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    whole = b'{"op": "add", "seq": 1}\n'
    torn = b'{"op": "add", "content": "' + b"y" * 200_000
    path.write_bytes(whole + torn)
    assert ensure_whole_lines(path) == len(torn)
    assert path.read_bytes() == whole
    path.write_bytes(b"z" * 100_000)  # a first append torn: no line at all is whole
    assert ensure_whole_lines(path) == 100_000
    assert path.read_bytes() == b""


def test_the_last_commit_is_its_lines_at_the_end(tmp_path: Path) -> None:
    path = tmp_path / "archive.jsonl"
    rows = [{"n": n, "seq": seq} for n, seq in enumerate([1, 2, 2, 3, 3, 3])]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert last_commit(path) == (3, 3)
    with path.open("a") as handle:
        handle.write('{"n": 6, "se')  # torn, in a file read without cutting it
    assert last_commit(path) == (3, 3)
    path.write_text('{"op": "add"}\n')  # a file of before the change log
    assert last_commit(path) == (0, 0)
    assert last_commit(tmp_path / "missing") == (0, 0)


def test_a_commit_found_complete_is_not_written_again(tmp_path: Path) -> None:
    history, archive = tmp_path / "history.jsonl", tmp_path / "archive.jsonl"
    files = JournalFiles(history, archive)
    files.write(1, [{"op": "add", "id": "a"}], [])
    files.write(2, [{"op": "remove", "id": "a"}], [{"entry": {"id": "a"}}])
    again = JournalFiles(history, archive)
    assert again.through == 1  # the last commit may be cut short: counted as not written
    again.write(2, [{"op": "remove", "id": "a"}], [{"entry": {"id": "a"}}])
    again.write(3, [{"op": "add", "id": "b"}], [])
    assert [(r["id"], r["seq"]) for r in read_jsonl(history)] == [("a", 1), ("a", 2), ("b", 3)]
    assert [r["seq"] for r in read_jsonl(archive)] == [2]


def test_a_commit_cut_short_gets_only_the_lines_it_lacks(tmp_path: Path) -> None:
    """The lines of the last commit are counted when that commit is written again, not at
    open (where only its seq is read)."""
    history, archive = tmp_path / "history.jsonl", tmp_path / "archive.jsonl"
    lines = [{"op": "add", "id": f"e{n}"} for n in range(5)]
    JournalFiles(history, archive).write(1, lines, [])
    written = history.read_text().splitlines(keepends=True)
    history.write_text("".join(written[:3]))  # the append cut after three lines
    assert last_commit(history, only_seq=True) == (1, 1)
    again = JournalFiles(history, archive)
    assert again.through == 0
    again.write(1, lines, [])
    assert [r["id"] for r in read_jsonl(history)] == [f"e{n}" for n in range(5)]
