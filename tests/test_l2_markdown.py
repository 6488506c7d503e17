"""L2 Markdown: exact round trip for any content, no forged entries, people's edits read back."""

from __future__ import annotations

import dataclasses
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemod.clock import truncate
from mnemod.domain.model import TIERS, Entry
from mnemod.errors import CorruptFileError, InvalidInputError
from mnemod.files.l2_markdown import (
    META_KEYS,
    L2Folder,
    parse_l2,
    render_l2,
    sort_entries,
)
from mnemod.ids import ID_PATTERN

T0 = datetime(2025, 3, 1, 9, 30, 0, 125000, tzinfo=UTC)
PATH = Path("l2/preference.md")

TRICKY = [
    "<!-- mnemod:entry {} -->",
    '<!-- mnemod:entry {"id": "FORGED", "created_at": "2020-01-01T00:00:00.000Z"} -->',
    "\\<!-- mnemod:entry {} -->",
    "\\\\<!-- mnemod:note x -->",
    '<!-- mnemod:l2 {"format": "other"} -->',
    "<!-- a comment",
    "-->",
    "## a heading",
    "# top",
    "```",
    "````python",
    "",
    "   ",
    "\t",
    "\r",
    "\r\n",
    "\n",
    "\n\n",
    "\ufeff",
    "日本語 café",
    "\u2028",
    "\x00",
]

texts = st.text(max_size=40)
content = st.lists(st.one_of(texts, st.sampled_from(TRICKY)), max_size=8).map("".join)
lines_content = st.lists(st.one_of(texts, st.sampled_from(TRICKY)), max_size=8).map("\n".join)
# hypothesis wants naive bounds and adds the zone itself
START = datetime(1970, 1, 1, tzinfo=UTC).replace(tzinfo=None)
END = datetime(2200, 1, 1, tzinfo=UTC).replace(tzinfo=None)
moments = st.datetimes(min_value=START, max_value=END, timezones=st.just(UTC)).map(truncate)
words = st.lists(st.one_of(texts, st.sampled_from(TRICKY)), max_size=4).map(tuple)


@st.composite
def entries(draw: st.DrawFn, type_: str = "preference") -> Entry:
    return Entry(
        id=draw(st.from_regex(ID_PATTERN, fullmatch=True)),
        type=type_,
        content=draw(st.one_of(content, lines_content)),
        created_at=draw(moments),
        updated_at=draw(moments),
        last_accessed_at=draw(moments),
        expires_at=draw(st.none() | moments),
        key=draw(st.none() | st.text(min_size=1, max_size=30)),
        importance=draw(st.integers(1, 5)),
        keywords=draw(words),
        tags=draw(words),
        tier=draw(st.sampled_from(TIERS)),
        triggers=draw(words),
        once=draw(st.booleans()),
        access_count=draw(st.integers(0, 2**53)),
        promotable=draw(st.booleans()),
        merged_from=tuple(draw(st.lists(st.from_regex(ID_PATTERN, fullmatch=True), max_size=3))),
        source=draw(texts),
        tokens=draw(st.integers(0, 2**31)),
    )


def entry(id_: str, content: str, minutes: int = 0, **fields: object) -> Entry:
    moment = T0 + timedelta(minutes=minutes)
    base = Entry(
        id=id_,
        type="preference",
        content=content,
        created_at=moment,
        updated_at=moment,
        last_accessed_at=moment,
        expires_at=None,
    )
    return dataclasses.replace(base, **fields)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(st.lists(entries(), max_size=5, unique_by=lambda e: e.id))
def test_round_trip_is_exact_for_any_entries(items: list[Entry]) -> None:
    text = render_l2("preference", items)
    parsed = parse_l2(text, PATH)
    assert parsed == sort_entries(items)
    assert render_l2("preference", parsed) == text


def test_every_entry_field_is_in_the_metadata() -> None:
    fields = {f.name for f in dataclasses.fields(Entry)}
    assert set(META_KEYS) == fields - {"content", "type"}


def test_content_cannot_forge_an_entry() -> None:
    victim = entry("01VICTIM", "real")
    forged_file = render_l2("preference", [entry("01FORGED", "forged", minutes=5)])
    attacker = entry("01ATTACK", forged_file + "\n" + forged_file.replace("\n", "\r\n"), minutes=1)
    text = render_l2("preference", [victim, attacker])
    parsed = parse_l2(text, PATH)
    assert [e.id for e in parsed] == ["01VICTIM", "01ATTACK"]
    assert parsed[1].content == attacker.content
    assert "\n<!-- mnemod:entry" not in text.split("01ATTACK", 1)[1].split("\n", 1)[1]


def test_content_is_shown_as_plain_markdown() -> None:
    text = render_l2(
        "preference", [entry("01A", "User prefers **Asia/Taipei**.\n\n- short answers")]
    )
    assert "\nUser prefers **Asia/Taipei**.\n\n- short answers\n" in text
    assert "\n## User prefers \\*\\*Asia/Taipei\\*\\*.\n" in text


def test_human_edits_read_back() -> None:
    items = [entry("01A", "first"), entry("01B", "second\nline two", 1), entry("01C", "third", 2)]
    text = render_l2("preference", items)
    blocks = text.split("\n## ")
    header, block_a, block_b, block_c = blocks[0], blocks[1], blocks[2], blocks[3]

    edited = text.replace("second\nline two", "second, reworded\n\nwith a new paragraph")
    parsed = parse_l2(edited, PATH)
    assert parsed[1].content == "second, reworded\n\nwith a new paragraph"
    assert parsed[1].id == "01B"
    assert (parsed[0], parsed[2]) == (items[0], items[2])

    deleted = "\n## ".join([header, block_a, block_c])
    assert [e.id for e in parse_l2(deleted, PATH)] == ["01A", "01C"]

    reordered = "\n## ".join([header, block_c, block_a, block_b])
    assert parse_l2(reordered, PATH) == items
    assert render_l2("preference", parse_l2(reordered, PATH)) == text


def test_editor_leniency() -> None:
    items = [entry("01A", "first"), entry("01B", "second", 1)]
    text = render_l2("preference", items)
    assert parse_l2(text.replace("\n", "\r\n"), PATH) == items
    assert parse_l2("\ufeff" + text.rstrip("\n") + "\n", PATH) == items
    retitled = text.replace("## first", "## A better label")
    assert parse_l2(retitled, PATH) == items


def test_stable_order() -> None:
    items = [
        entry("01C", "c", 0),
        entry("01A", "a", 0),
        entry("01B", "b", -5),
        entry("01D", "d", 10),
    ]
    expected = render_l2("preference", items)
    for seed in range(5):
        shuffled = items[:]
        random.Random(seed).shuffle(shuffled)
        assert render_l2("preference", shuffled) == expected
    assert [e.id for e in parse_l2(expected, PATH)] == ["01B", "01A", "01C", "01D"]


def test_render_rejects_inconsistent_input() -> None:
    with pytest.raises(InvalidInputError):
        render_l2("preference", [entry("01A", "x", type="context")])
    with pytest.raises(InvalidInputError):
        render_l2("preference", [entry("01A", "x"), entry("01A", "y", 1)])
    with pytest.raises(InvalidInputError):
        render_l2("../etc", [])


def _marker_line(text: str, id_: str) -> int:
    return next(n for n, line in enumerate(text.split("\n"), 1) if f'"id": "{id_}"' in line)


@pytest.mark.parametrize(
    ("old", "new", "reason"),
    [
        ('"importance": 3,', '"importance": 3', "not valid JSON"),
        ('"importance": 3,', '"importance": 9,', "importance"),
        ('"tier": "cold"', '"tier": "cold", "colour": "red"', "unknown metadata key 'colour'"),
        ('"created_at": "2025', '"created_at": "yesterday', "created_at"),
        ('{"id": "01B", ', "[", "not valid JSON"),
        (" -->", "", "malformed mnemod marker"),
    ],
)
def test_corrupt_metadata_names_path_and_line(old: str, new: str, reason: str) -> None:
    text = render_l2("preference", [entry("01A", "a"), entry("01B", "b", 1)])
    line = _marker_line(text, "01B")
    lines = text.split("\n")
    lines[line - 1] = lines[line - 1].replace(old, new, 1)
    with pytest.raises(CorruptFileError) as caught:
        parse_l2("\n".join(lines), PATH)
    assert caught.value.path == PATH
    assert caught.value.line == line
    assert reason in caught.value.reason
    assert str(caught.value).startswith(f"{PATH}:{line}: ")


def test_other_corruption() -> None:
    text = render_l2("preference", [entry("01A", "a")])
    duplicated = text + text.split("\n\n", 2)[2]
    with pytest.raises(CorruptFileError, match="already used"):
        parse_l2(duplicated, PATH)
    with pytest.raises(CorruptFileError, match="before the first entry") as caught:
        parse_l2(text.replace("# preference\n", "# preference\nmy notes\n"), PATH)
    assert caught.value.line == 2
    with pytest.raises(CorruptFileError, match="unsupported format"):
        parse_l2(text.replace("mnemod.l2/1", "mnemod.l2/9"), PATH)
    with pytest.raises(CorruptFileError, match="unknown marker"):
        parse_l2(text + "<!-- mnemod:bogus {} -->\n", PATH)


def test_folder_load_write_and_own_writes(tmp_path: Path) -> None:
    folder = L2Folder(tmp_path / "l2")
    assert folder.load() == {}
    prefs = [entry("01A", "tz: Asia/Taipei"), entry("01B", "short answers", 1)]
    insight = [dataclasses.replace(entry("01C", "cache the index"), type="insight")]
    digest = folder.write("preference", prefs)
    folder.write("insight", insight)
    path = folder.path_for("preference")
    assert len(digest) == 64
    assert folder.load() == {"insight": insight, "preference": prefs}
    assert folder.digest(path) == digest  # the bytes mnemod wrote

    path.write_text(path.read_text().replace("short answers", "brief answers"))
    assert folder.digest(path) != digest  # a person's edit
    assert folder.load()["preference"][1].content == "brief answers"
    _, read_digest = folder.read(path)
    assert read_digest == folder.digest(path)  # the digest of what was read
    before = path.stat().st_mtime_ns
    folder.write("preference", folder.load()["preference"])
    assert path.stat().st_mtime_ns == before  # same bytes: not rewritten
    assert folder.digest(folder.path_for("context")) is None
    (tmp_path / "l2" / ".preference.md.swp").write_text("junk")
    assert set(folder.load()) == {"insight", "preference"}


def test_broken_file_is_reported_and_left_alone(tmp_path: Path) -> None:
    folder = L2Folder(tmp_path)
    folder.write("preference", [entry("01A", "a")])
    path = folder.path_for("preference")
    broken = path.read_text().replace('"id": "01A"', '"id": ')
    path.write_text(broken)
    with pytest.raises(CorruptFileError) as caught:
        folder.load()
    assert caught.value.path == path
    assert caught.value.line == _marker_line(broken.replace('"id": ', '"id": "01A"'), "01A")
    assert path.read_text() == broken


def test_id_in_two_files_is_reported(tmp_path: Path) -> None:
    folder = L2Folder(tmp_path)
    folder.write("context", [dataclasses.replace(entry("01A", "a"), type="context")])
    folder.write("preference", [entry("01A", "a")])
    with pytest.raises(CorruptFileError, match=r"also in context\.md"):
        folder.load()


def test_bad_file_names_and_bytes(tmp_path: Path) -> None:
    (tmp_path / "README.md").write_text("# notes\n")
    with pytest.raises(CorruptFileError, match="not a memory type"):
        L2Folder(tmp_path).load()
    (tmp_path / "README.md").unlink()
    (tmp_path / "context.md").write_bytes(b"# context\n\n\xff\n")
    with pytest.raises(CorruptFileError, match="UTF-8") as caught:
        L2Folder(tmp_path).load()
    assert caught.value.line == 3
