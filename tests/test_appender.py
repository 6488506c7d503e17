"""Appends through a descriptor held open between them (files.atomic.Appender)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from helpers import read_only
from mnemod.files.atomic import FILE_MODE, Appender, append_bytes
from mnemod.files.change_log import ChangeLog
from mnemod.files.journal import JournalFiles


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_appends_match_append_bytes_and_give_the_size_before(tmp_path: Path) -> None:
    held, plain = tmp_path / "sub" / "held.jsonl", tmp_path / "sub" / "plain.jsonl"
    appender = Appender()
    sizes = [appender.append(held, line, sync=n % 2 == 0) for n, line in enumerate([b"a\n"] * 5)]
    for line in [b"a\n"] * 5:
        append_bytes(plain, line)
    assert held.read_bytes() == plain.read_bytes() == b"a\n" * 5
    assert sizes == [0, 2, 4, 6, 8]
    assert held.stat().st_mode & 0o777 == FILE_MODE
    appender.close()


def test_a_file_removed_between_appends_is_made_again_not_written_unseen(tmp_path: Path) -> None:
    path = tmp_path / "held.jsonl"
    appender = Appender()
    appender.append(path, b"first\n")
    path.unlink()  # a person removed it while the descriptor was open
    assert appender.append(path, b"second\n") == 0
    assert path.read_bytes() == b"second\n"
    appender.close()


def test_one_descriptor_at_a_time_and_none_after_close(tmp_path: Path) -> None:
    before = open_fds()
    appender = Appender()
    for name in ("one", "two", "three"):
        appender.append(tmp_path / name, b"x\n")
        assert open_fds() == before + 1
    appender.close()
    assert open_fds() == before
    appender.append(tmp_path / "one", b"y\n")  # opened again by an append after close
    assert (tmp_path / "one").read_bytes() == b"x\ny\n"
    del appender  # the descriptor goes with the object
    assert open_fds() == before


def test_a_log_whose_newest_segment_was_removed_appends_to_a_file_again(tmp_path: Path) -> None:
    folder = tmp_path / "log"
    log = ChangeLog(folder)
    log.append([{"seq": 1, "ops": []}])
    (segment,) = folder.glob("*.jsonl")
    segment.unlink()
    log.append([{"seq": 2, "ops": []}])
    assert [r["seq"] for r in ChangeLog(folder, readonly=True).read_after(0)] == [2]
    log.close()


def test_journal_lines_reach_their_files_and_close_releases_them(tmp_path: Path) -> None:
    before = open_fds()
    files = JournalFiles(tmp_path / "history.jsonl", tmp_path / "archive.jsonl")
    files.write(1, [{"op": "add", "id": "a"}], [{"reason": "x"}])
    files.write(2, [{"op": "remove", "id": "a"}], [])
    history = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    archive = [json.loads(line) for line in (tmp_path / "archive.jsonl").read_text().splitlines()]
    assert [(r["op"], r["seq"]) for r in history] == [("add", 1), ("remove", 2)]
    assert archive == [{"reason": "x", "seq": 1}]
    files.close()
    assert open_fds() == before


@pytest.mark.process
@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("mount") is None, reason="mounts as root")
def test_a_file_whose_folder_went_read_only_fails_to_append(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    path = folder / "held.jsonl"
    appender = Appender()
    appender.append(path, b"first\n")
    with read_only(folder), pytest.raises(OSError):
        appender.append(path, b"second\n")  # not through the descriptor opened before
    assert appender.append(path, b"third\n") == len(b"first\n")
    assert path.read_bytes() == b"first\nthird\n"
    appender.close()
