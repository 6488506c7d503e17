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


def test_a_records_seq_is_read_without_decoding_it_and_only_when_its_crc_holds() -> None:
    line = change_log.encode_record({"seq": 12, "ops": [{"op": "del", "id": "x" * 50}]})
    assert change_log.record_seq(line) == 12
    assert change_log.record_seq(line[:-1]) is None  # torn
    assert change_log.record_seq(line.replace(b"xxx", b"xxy", 1)) is None  # bad CRC
    other = change_log.encode_record({"at": "now", "seq": 3})  # seq not first: decoded
    assert change_log.record_seq(other) == 3


def five_records(tmp_path: Path) -> Path:
    """A log folder holding records 1 to 5."""
    folder = tmp_path / "log"
    log = ChangeLog(folder)
    for seq in range(1, 6):
        log.append([{"seq": seq, "ops": []}])
    return folder


def test_records_at_or_before_the_checkpoint_are_skipped_but_must_be_sound(
    tmp_path: Path,
) -> None:
    folder = five_records(tmp_path)
    assert [r["seq"] for r in ChangeLog(folder).read_after(3)] == [4, 5]
    segment = next(folder.glob("*.jsonl"))
    lines = segment.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"ops"', b'"opz"')  # record 2: its CRC no longer holds
    segment.write_bytes(b"".join(lines))
    with pytest.raises(change_log.CorruptLogError):
        list(ChangeLog(folder, readonly=True).read_after(3))


def test_reading_after_the_open_starts_where_the_open_checked_and_sees_later_appends(
    tmp_path: Path,
) -> None:
    folder = five_records(tmp_path)
    again = ChangeLog(folder)
    assert [r["seq"] for r in again.read_after(2)] == [3, 4, 5]
    assert [r["seq"] for r in again.read_after(5)] == []
    again.append([{"seq": 6, "ops": []}, {"seq": 7, "ops": []}])
    assert [r["seq"] for r in again.read_after(5)] == [6, 7]
    assert [r["seq"] for r in again.read_after(0)] == list(range(1, 8))
    segment = next(folder.glob("*.jsonl"))
    with segment.open("ab") as handle:
        handle.write(b'{"seq":8,"ops":[]')  # torn: never committed
    reader = ChangeLog(folder, readonly=True)
    assert [r["seq"] for r in reader.read_after(6)] == [7]


@pytest.mark.parametrize("reopened", [False, True])
def test_a_long_last_record_is_read_back_from_its_segment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reopened: bool
) -> None:
    """A bulk import's record is tens of MB: the log holds where it lies, not the line, and
    gives the same line and CRC; once that segment is emptied it has no last line to give."""
    monkeypatch.setattr(change_log, "HELD_LINE_BYTES", 100)
    folder = tmp_path / "log"
    log = ChangeLog(folder)
    log.append([{"seq": 1, "ops": []}])
    short = log.last_line
    assert short is not None and log._last == short  # short: held
    log.append([{"seq": 2, "ops": [], "note": "x" * 500}])
    line = change_log.encode_record({"seq": 2, "ops": [], "note": "x" * 500})
    if reopened:
        log = ChangeLog(folder)
    assert isinstance(log._last, tuple)
    assert log.last_line == line and log.last_crc == change_log.line_crc(line)
    for segment in folder.glob("*.jsonl"):
        segment.write_bytes(b"")  # a person emptied it
    assert log.last_line is None


def test_long_records_are_checked_in_place_at_the_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long line is checked where it lies in the segment (its CRC over a view): the same
    seq, the same torn last record cut, the same damaged record refused as a short one."""
    monkeypatch.setattr(change_log, "HELD_LINE_BYTES", 100)
    folder = tmp_path / "log"
    log = ChangeLog(folder)
    log.append([{"seq": 1, "ops": [], "note": "x" * 500}, {"seq": 2, "ops": []}])
    log.append([{"note": "y" * 500, "seq": 3}])  # seq not first: decoded
    (segment,) = folder.glob("*.jsonl")
    whole = segment.read_bytes()
    again = ChangeLog(folder)
    assert again.last_seq == 3 and [r["seq"] for r in again.read_after(0)] == [1, 2, 3]
    segment.write_bytes(whole + whole.splitlines(keepends=True)[0][:-1])  # torn, long
    again = ChangeLog(folder)
    assert again.last_seq == 3 and segment.read_bytes() == whole
    segment.write_bytes(whole.replace(b"xxx", b"xxy", 1))  # record 1: its CRC no longer holds
    with pytest.raises(change_log.CorruptLogError):
        ChangeLog(folder, readonly=True)
