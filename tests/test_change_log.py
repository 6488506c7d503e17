"""The change log's files: segments, the size it keeps, pruning, a torn last record."""

from __future__ import annotations

from pathlib import Path

import pytest

from mnemod.files import change_log
from mnemod.files.change_log import ChangeLog


def on_disk(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*.jsonl"))


def test_segments_roll_over_and_the_kept_size_matches_the_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(change_log, "SEGMENT_BYTES", 300)
    folder = tmp_path / "log"
    log = ChangeLog(folder)
    for seq in range(1, 21):
        log.append([{"seq": seq, "ops": [], "note": "x" * 40}])
        assert log.size == on_disk(folder)
    assert len(log.segments()) > 3
    assert [r["seq"] for r in log.read_after(0)] == list(range(1, 21))
    assert log.prune_before(15) > 0
    assert log.size == on_disk(folder)
    assert [r["seq"] for r in log.read_after(14)] == list(range(15, 21))
    again = ChangeLog(folder)  # what a restart reads back
    assert again.last_seq == 20 and again.size == log.size
    again.append([{"seq": 21, "ops": []}])
    assert again.size == on_disk(folder)


def test_a_torn_last_record_is_cut_and_the_seq_goes_on(tmp_path: Path) -> None:
    folder = tmp_path / "log"
    log = ChangeLog(folder)
    log.append([{"seq": 1, "ops": []}, {"seq": 2, "ops": []}])
    (segment,) = folder.glob("*.jsonl")
    whole = segment.read_bytes()
    segment.write_bytes(whole + b'{"seq":3,"ops":[')  # a crash mid-append
    assert [r["seq"] for r in ChangeLog(folder, readonly=True).read_after(0)] == [1, 2]
    again = ChangeLog(folder)
    assert segment.read_bytes() == whole and again.last_seq == 2
    again.append([{"seq": 3, "ops": []}])
    assert [r["seq"] for r in again.read_after(0)] == [1, 2, 3]
