"""The engine through the public API: add, dedup, access, GC, promotion, history, files."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import mnemod
from mnemod.clock import FixedClock
from mnemod.domain.keywords import extract_keywords
from mnemod.errors import CorruptIndexError, InvalidInputError, LockedError, NotFoundError
from mnemod.files.journal import read_jsonl, story
from mnemod.files.l2_markdown import parse_l2
from mnemod.files.l3_store import load_index
from mnemod.store.commits import ACCESS_SAVE_SECONDS
from mnemod.store.engine import Engine
from mnemod.store.l2_layer import ACCESS_WRITE_SECONDS

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(T0)


@pytest.fixture
def store(tmp_path: Path, clock: FixedClock) -> Iterator[mnemod.Store]:
    opened = mnemod.open(tmp_path / "data", clock=clock)
    yield opened
    opened.close()


def reopen(tmp_path: Path, clock: FixedClock) -> mnemod.Store:
    return mnemod.open(tmp_path / "data", clock=clock)


def test_add_sets_ttl_by_type_and_importance(store: mnemod.Store) -> None:
    entry = store.add("User prefers Asia/Taipei", type="preference", importance=4)
    assert entry.expires_at == T0 + timedelta(days=45)
    assert entry.keywords == ("user", "prefer", "asia", "taipei")
    assert entry.tokens > 0


def test_typescript_dedup_returns_the_survivor(store: mnemod.Store, clock: FixedClock) -> None:
    first = store.add("User likes TypeScript")
    clock.advance(timedelta(minutes=1))
    second = store.add("User likes TypeScript a lot")
    assert second.id == first.id
    assert second.content == "User likes TypeScript a lot"
    assert len(store.list()) == 1
    assert len(second.merged_from) == 1


def test_merges_leave_the_lookups_as_a_rebuild_makes_them(
    tmp_path: Path, clock: FixedClock
) -> None:
    """A survivor whose words a merge kept is not indexed again; one whose words changed
    is: either way every lookup answers as on the store reopened, its lookups built anew."""
    texts = [
        "User likes TypeScript a lot",
        "User likes TypeScript",  # a subset of the survivor's words: they stay
        "User likes TypeScript and Rust",  # more words: indexed again
        "The user's dog is called Bao",
        "The user's dog is called Bao Bao",
        "User lives in Taipei near the river",
    ]
    with reopen(tmp_path, clock) as store:
        for text in texts:
            clock.advance(timedelta(minutes=1))
            store.add(text)
        assert len(store.list()) < len(texts)
        live = lookups(store.engine, [*texts, "User likes Rust", "Taipei river"])
    assert any(live)
    with reopen(tmp_path, clock) as again:
        assert lookups(again.engine, [*texts, "User likes Rust", "Taipei river"]) == live


def lookups(engine: Engine, texts: list[str]) -> list[tuple[str, float] | None]:
    """What `engine.similar` finds for an entry of each text, as (id, score)."""
    model = next(iter(engine.entries.values()))
    found: list[tuple[str, float] | None] = []
    for n, text in enumerate(texts):
        words = extract_keywords(text, engine.config.limits.max_keywords)
        probe = replace(model, id=f"probe{n}", content=text, keywords=tuple(words), merged_from=())
        match = engine.similar(probe)
        found.append(None if match is None else (match[0].id, round(match[1], 6)))
    return found


def test_chinese_and_japanese_memories_are_found_and_deduplicated(store: mnemod.Store) -> None:
    """Memories in unspaced scripts are matched by their words, not as whole sentences."""
    tea = store.add("使用者喜歡喝烏龍茶")
    store.add("使用者住在台北市大安區")
    store.add("東京タワーに行きたい")
    store.add("The user's dog is called Bao")
    again = store.add("使用者很喜歡喝烏龍茶")  # the same fact, worded a little differently
    assert again.id == tea.id and again.content == "使用者很喜歡喝烏龍茶"
    first = store.resolve("使用者喜歡喝什麼茶？", budget=100).items[0]
    assert first.content == "使用者很喜歡喝烏龍茶"
    assert "東京タワーに行きたい" in store.resolve("東京で何をしたい？", budget=100).text


def test_different_types_are_not_merged(store: mnemod.Store) -> None:
    store.add("User likes TypeScript", type="context")
    store.add("User likes TypeScript", type="preference")
    assert len(store.list()) == 2


def test_client_id_makes_add_idempotent(store: mnemod.Store) -> None:
    first = store.add("Deploys happen on Fridays", id="agent-1:42")
    again = store.add("Deploys happen on Fridays", id="agent-1:42")
    assert again.id == first.id == "agent-1:42"
    assert len(store.list()) == 1


def test_key_upserts(store: mnemod.Store) -> None:
    store.add("Build is green", key="ci-state", type="progress")
    updated = store.add("Build is red on main", key="ci-state", type="progress")
    assert store.get("ci-state").content == "Build is red on main"
    assert len(store.list()) == 1
    assert updated.key == "ci-state"


def test_access_extends_until_the_cap(store: mnemod.Store, clock: FixedClock) -> None:
    entry = store.add("Project codename is Falcon")
    for _ in range(20):
        store.access(entry.id)
    assert store.get(entry.id).expires_at == T0 + timedelta(days=90)
    assert store.get(entry.id).access_count == 20


def test_text_that_is_not_utf8_is_refused(store: mnemod.Store) -> None:
    """A lone surrogate (bytes a shell passed that were not UTF-8) could never be saved:
    refused naming the field, and nothing is stored."""
    for fields in (
        {"content": "caf\udce9"},
        {"content": "fine", "key": "k\udcff"},
        {"content": "fine", "tags": ["\ud800"]},
        {"content": "fine", "source": "\udcff"},
    ):
        with pytest.raises(InvalidInputError, match="not valid UTF-8"):
            store.add(**fields)
    assert store.list() == []


def test_invalid_input_names_the_field(store: mnemod.Store) -> None:
    with pytest.raises(InvalidInputError, match="importance"):
        store.add("x y z", importance=9)
    with pytest.raises(InvalidInputError, match="type"):
        store.add("x y z", type="gossip")
    with pytest.raises(InvalidInputError, match="content"):
        store.add("   ")
    with pytest.raises(InvalidInputError, match="triggers"):
        store.add("x y z", triggers=["(a)\\1"])
    with pytest.raises(InvalidInputError, match="content"):
        store.add("x" * 70000)


def test_gc_expires_to_archive_with_reason(
    tmp_path: Path, store: mnemod.Store, clock: FixedClock
) -> None:
    short = store.add("Sprint 12 is half done", type="progress")
    keep = store.add("User prefers dark mode", type="preference")
    clock.advance(timedelta(days=8))
    dry = store.gc(dry_run=True)
    assert (dry.expired, dry.dry_run) == (1, True)
    assert store.find(short.id) is not None
    report = store.gc()
    assert (report.expired, report.kept) == (1, 1)
    assert store.find(short.id) is None
    assert store.find(keep.id) is not None
    archived = list(read_jsonl(tmp_path / "data" / "default" / "l3" / "archive.jsonl"))
    assert archived[0]["entry"]["id"] == short.id
    assert archived[0]["reason"].startswith("expired")


def test_gc_merges_without_chaining(tmp_path: Path, clock: FixedClock) -> None:
    strict = mnemod.open(tmp_path / "d", clock=clock, config={"dedup": {"threshold": 0.9}})
    a = strict.add("alpha", keywords=["w1", "w2", "w3", "a1", "a2"])
    clock.advance(timedelta(minutes=1))
    b = strict.add("beta", keywords=["w1", "w2", "w3", "b1", "b2"])
    clock.advance(timedelta(minutes=1))
    c = strict.add("gamma", keywords=["w1", "w2", "w3", "a1", "b1"])
    strict.close()
    # The operator lowers the threshold: a~c (4/6) and b~c (4/6) pass, a~b (3/7) does not;
    # c joins the oldest, a, and b stays on its own.
    store = mnemod.open(tmp_path / "d", clock=clock, config={"dedup": {"threshold": 0.5}})
    report = store.gc()
    assert report.merged == 1
    remaining = {e.id for e in store.list()}
    assert remaining == {a.id, b.id}
    assert c.id in store.get(a.id).merged_from
    store.close()


def test_promotion_manual_and_back_through_get(
    tmp_path: Path, store: mnemod.Store, clock: FixedClock
) -> None:
    entry = store.add("Prod DB is postgres 16 on db1", type="relation")
    for _ in range(3):
        store.access(entry.id)
    report = store.gc()
    assert (report.promotable, report.promoted) == (1, 0)
    store.promote(entry.id)
    md = (tmp_path / "data" / "default" / "l2" / "relation.md").read_text()
    assert "Prod DB is postgres 16 on db1" in md
    store.close()
    again = reopen(tmp_path, clock)
    got = again.get(entry.id)
    assert got.expires_at is None
    assert again.engine.layer_of(got) == "l2"
    assert [e.id for e in again.list(layer="l3")] == []
    again.close()


def test_accesses_of_l2_entries_reach_their_file_after_the_wait_on_the_engines_clock(
    tmp_path: Path, store: mnemod.Store, clock: FixedClock
) -> None:
    entry = store.add("Prod DB is postgres 16 on db1", type="relation")
    store.promote(entry.id)
    path = tmp_path / "data" / "default" / "l2" / "relation.md"

    def counted() -> list[int]:
        return [e.access_count for e in parse_l2(path.read_text(), path)]

    clock.advance(ACCESS_SAVE_SECONDS)
    store.access(entry.id)  # committed now, alone: its file waits ACCESS_WRITE_SECONDS
    assert counted() == [0]
    clock.advance(ACCESS_WRITE_SECONDS - 1)
    store.add("The backup runs nightly at three", type="insight")  # a commit, files derived
    assert counted() == [0]
    clock.advance(2)
    store.add("The printer is on the second floor", type="insight")
    assert counted() == [1]


def test_promotion_auto_policy(tmp_path: Path, clock: FixedClock) -> None:
    store = mnemod.open(tmp_path / "d", clock=clock, config={"promotion": {"policy": "auto"}})
    entry = store.add("User's editor is helix")
    for _ in range(3):
        store.access(entry.id)
    assert store.gc().promoted == 1
    assert store.engine.layer_of(store.get(entry.id)) == "l2"
    store.close()


def test_history_tells_a_merged_entry_story(
    tmp_path: Path, store: mnemod.Store, clock: FixedClock
) -> None:
    first = store.add("User likes TypeScript")
    store.add("User likes TypeScript a lot")
    folded_id = store.get(first.id).merged_from[0]
    ops = [r["op"] for r in story(tmp_path / "data" / "default" / "history.jsonl", first.id)]
    assert ops == ["add", "merge"]
    assert [r["op"] for r in story(tmp_path / "data" / "default" / "history.jsonl", folded_id)] == [
        "add",
        "merge",
    ]


def test_second_writer_is_refused(tmp_path: Path, store: mnemod.Store, clock: FixedClock) -> None:
    with pytest.raises(LockedError, match="locked by another writer"):
        reopen(tmp_path, clock)


def test_index_survives_reopen_and_keeps_a_backup(
    tmp_path: Path, store: mnemod.Store, clock: FixedClock
) -> None:
    entry = store.add("Cat is called Miso")
    store.add("Dog is called Bao")
    store.close()
    index = tmp_path / "data" / "default" / "l3" / "index.json"
    data = json.loads(index.read_text())
    assert data["format"] == "mnemod.l3/2"
    again = reopen(tmp_path, clock)
    assert again.get(entry.id).content == "Cat is called Miso"
    again.add("Bird is called Kiwi")
    again.close()  # a second checkpoint: the first becomes the backup
    assert json.loads(index.with_name("index.json.bak").read_text())["format"] == "mnemod.l3/2"


def test_corrupt_index_is_never_overwritten(
    tmp_path: Path, store: mnemod.Store, clock: FixedClock
) -> None:
    store.add("Cat is called Miso")
    store.close()
    index = tmp_path / "data" / "default" / "l3" / "index.json"
    index.write_text('{"format": "mnemod.l3/1", "entries": [')
    index.with_name("index.json.bak").write_text("garbage")
    with pytest.raises(CorruptIndexError, match=r"index\.json"):
        reopen(tmp_path, clock)
    assert index.read_text() == '{"format": "mnemod.l3/1", "entries": ['


def test_corrupt_index_recovers_from_backup(
    tmp_path: Path, store: mnemod.Store, clock: FixedClock
) -> None:
    store.add("Cat is called Miso")
    store.close()
    again = reopen(tmp_path, clock)
    again.add("Dog is called Bao")
    again.close()  # the .bak now holds the first entry, the log the second
    index = tmp_path / "data" / "default" / "l3" / "index.json"
    index.write_text("{truncated")
    again = reopen(tmp_path, clock)
    assert [e.content for e in again.list()] == ["Cat is called Miso", "Dog is called Bao"]
    again.close()
    assert next(iter(index.parent.glob("index.json.corrupt-*"))).read_text() == "{truncated"


def test_index_the_fast_reader_refuses_still_reads_as_before(
    tmp_path: Path, store: mnemod.Store, clock: FixedClock
) -> None:
    """A hand-edited index with what only Python's own reader takes (a 70-bit integer,
    NaN) opens as it always did: it is not taken for a corrupt file."""
    entry = store.add("Cat is called Miso")
    store.close()
    index = tmp_path / "data" / "default" / "l3" / "index.json"
    text = index.read_text()
    edited = text.replace('"stats":{', '"stats":{"edited":1180591620717411303424,"x":NaN,', 1)
    assert edited != text
    index.write_text(edited)
    again = reopen(tmp_path, clock)
    assert again.get(entry.id).content == "Cat is called Miso"
    again.close()
    assert not list(index.parent.glob("index.json.corrupt-*"))


def test_remove_archives(tmp_path: Path, store: mnemod.Store) -> None:
    entry = store.add("Temporary note about lunch")
    store.remove(entry.id)
    with pytest.raises(NotFoundError):
        store.get(entry.id)
    archived = list(read_jsonl(tmp_path / "data" / "default" / "l3" / "archive.jsonl"))
    assert archived[-1]["reason"] == "removed"


def test_access_never_recreates_a_removed_entry(store: mnemod.Store) -> None:
    entry = store.add("Temporary note about lunch")
    store.remove(entry.id)
    with pytest.raises(NotFoundError):
        store.access(entry.id)
    assert store.list() == []


def test_access_of_a_merged_id_reaches_the_survivor(store: mnemod.Store) -> None:
    first = store.add("User likes TypeScript")
    store.add("User likes TypeScript a lot")
    folded = store.get(first.id).merged_from[0]
    assert store.access(folded).id == first.id
    assert len(store.list()) == 1


def test_a_persons_l2_edit_survives_the_next_promotion(tmp_path: Path, store: mnemod.Store) -> None:
    first = store.add("Prod DB is postgres 16", type="relation")
    store.promote(first.id)
    md = tmp_path / "data" / "default" / "l2" / "relation.md"
    md.write_text(md.read_text().replace("postgres 16", "postgres 17 since March"))
    second = store.add("Cache is redis 7 on cache1", type="relation")
    store.promote(second.id)
    text = md.read_text()
    assert "postgres 17 since March" in text and "redis 7 on cache1" in text
    assert store.get(first.id).content == "Prod DB is postgres 17 since March"


def test_a_broken_l2_file_is_never_overwritten(tmp_path: Path, clock: FixedClock) -> None:
    store = mnemod.open(tmp_path / "data", clock=clock)
    first = store.add("Prod DB is postgres 16", type="relation")
    store.promote(first.id)
    store.close()
    md = tmp_path / "data" / "default" / "l2" / "relation.md"
    broken = md.read_text().replace('"importance": 3', '"importance": "high"')
    md.write_text(broken)
    again = mnemod.open(tmp_path / "data", clock=clock)
    second = again.add("Cache is redis 7 on cache1", type="relation")
    again.promote(second.id)  # committed; the file's write waits for a person
    assert md.read_text() == broken
    assert again.engine.layer_of(again.get(second.id)) == "l2"
    assert again.engine.derived_waiting == {
        "l2/relation.md": f"relation.md line {_marker_line(md)}: "
        + again.engine.commits.l2.broken["relation"].reason
    }
    again.close()
    assert md.read_text() == broken  # closing does not overwrite it either
    md.write_text(broken.replace('"importance": "high"', '"importance": 3'))  # fixed
    third = mnemod.open(tmp_path / "data", clock=clock)
    assert third.engine.derived_waiting == {}
    assert "Cache is redis 7 on cache1" in md.read_text()
    assert "Prod DB is postgres 16" in md.read_text()
    third.close()


def _marker_line(md: Path) -> int:
    return next(n for n, line in enumerate(md.read_text().splitlines(), 1) if "high" in line)


def test_update_recomputes_keywords_tokens_and_ttl(store: mnemod.Store) -> None:
    entry = store.add("Standup is at 10:00", type="progress")
    updated = store.update(entry.id, content="Standup moved to 11:30 on Mondays", importance=5)
    assert "monday" in updated.keywords
    assert updated.expires_at == T0 + timedelta(days=14)
    assert updated.tokens > entry.tokens or updated.tokens > 0


def test_history_lines_follow_the_log_once_each_torn_or_missing(
    tmp_path: Path, clock: FixedClock
) -> None:
    store = mnemod.open(tmp_path / "data", clock=clock)
    kept = store.add("Cat is called Miso")
    later = store.add("Dog is called Bao")
    store.engine._lock.release()  # type: ignore[union-attr]  # the kernel does this on kill -9
    history = tmp_path / "data" / "default" / "history.jsonl"
    lines = history.read_text().splitlines(keepends=True)
    assert len(lines) == 2
    history.write_text(lines[0] + lines[1][:15])  # the second append torn by a crash
    again = reopen(tmp_path, clock)
    assert [r["id"] for r in read_jsonl(history)] == [kept.id, later.id]
    assert history.read_text().endswith("\n")
    again.close()
    third = reopen(tmp_path, clock)  # nothing appended twice
    assert [r["id"] for r in read_jsonl(history)] == [kept.id, later.id]
    assert [e.id for e in third.list()] == [kept.id, later.id]
    third.close()


def test_a_commits_journal_lines_cut_short_by_a_kill_are_completed_once(
    tmp_path: Path, clock: FixedClock
) -> None:
    store = mnemod.open(tmp_path / "data", clock=clock)
    texts = ("Cat is called Miso", "Dog is called Bao", "The boat sails on Sundays")
    added = [store.add(text) for text in texts]
    with store.engine.batch():  # one commit: its three archived copies in one append
        for entry in added:
            store.remove(entry.id)
    store.engine._lock.release()  # type: ignore[union-attr]  # the kernel does this on kill -9
    folder = tmp_path / "data" / "default"
    archive, history = folder / "l3" / "archive.jsonl", folder / "history.jsonl"
    lines = archive.read_bytes().splitlines(keepends=True)
    assert len(lines) == 3
    # a kill -9 stops a write at a page boundary: the first line whole, the second torn,
    # and the history never reached
    archive.write_bytes(lines[0] + lines[1][:20])
    history.write_bytes(b"".join(history.read_bytes().splitlines(keepends=True)[:3]))
    ids = [e.id for e in added]
    for _ in range(2):  # and nothing written twice at the next open
        reopen(tmp_path, clock).close()
        assert [r["entry"]["id"] for r in read_jsonl(archive)] == ids
        removes = [r["id"] for r in read_jsonl(history) if r["op"] == "remove"]
        assert removes == ids


def test_resolve_selections_count_for_ttl_but_not_for_ranking(
    store: mnemod.Store, clock: FixedClock
) -> None:
    entry = store.add("The cat is named Miso")
    resolver = store.engine.recall.resolver

    def ranked() -> tuple[int, datetime]:
        candidate = resolver.get(entry.id)
        assert candidate is not None
        return candidate.access_count, candidate.last_accessed_at

    store.resolve("what is the cat called?", budget=200)
    picked = store.get(entry.id)
    assert (picked.access_count, picked.selected_count) == (1, 1)
    assert picked.expires_at == T0 + timedelta(days=21)  # the TTL is extended all the same
    assert ranked()[0] == 0
    clock.advance(timedelta(days=1))
    store.access(entry.id)
    assert ranked() == (1, T0 + timedelta(days=1))  # frecency reads both
    clock.advance(timedelta(days=1))
    store.resolve("what is the cat called?", budget=200)  # a selection: same count ...
    assert ranked() == (1, T0 + timedelta(days=2))  # ... but a later last access
    clock.advance(timedelta(days=1))
    store.access(entry.id)
    assert ranked() == (2, T0 + timedelta(days=3))


def test_index_json_is_one_compact_document(store: mnemod.Store) -> None:
    """Entries are written from texts kept between saves; the file is still exactly the
    compact JSON of the whole document, whatever changed in between."""
    kept = store.add("Café opening hours moved to 8:00", type="context")
    changed = store.add("The build server is called ferret", type="context")
    store.add("Deploy windows are Tuesday mornings", type="context")
    odd = 'Quote "q", path C:\\tmp\tTab, 日本語 🙂, sep\u2028end </script>'
    store.add(odd, type="context")
    store.update(changed.id, content="The build server is called stoat now")
    store.access(kept.id)
    store.remove(kept.id)
    store.engine.checkpoint()
    raw = store.engine.paths.index.read_text(encoding="utf-8")
    document = json.loads(raw)
    assert raw == json.dumps(document, ensure_ascii=False, separators=(",", ":")) + "\n"
    assert list(document) == [
        "format",
        "log_seq",
        "last_event_id",
        "saved_at",
        "stats",
        "l2_written",
        "l2",
        "entries",
    ]
    assert [e["content"] for e in document["entries"]] == [
        "The build server is called stoat now",
        "Deploy windows are Tuesday mornings",
        odd,
    ]


def test_an_entry_in_l2_and_in_an_older_index_leaves_the_index(
    tmp_path: Path, clock: FixedClock
) -> None:
    store = reopen(tmp_path, clock)
    entry = store.add("Deploys go through the staging cluster first", type="insight")
    store.close()
    index = tmp_path / "data" / "default" / "l3" / "index.json"
    before = index.read_bytes()
    store = reopen(tmp_path, clock)
    store.promote(entry.id)
    store.close()
    index.write_bytes(before)  # a crash after the L2 write, before the index was saved
    again = reopen(tmp_path, clock)
    assert again.engine.layer_of(again.get(entry.id)) == "l2"  # L2 wins
    again.close()
    assert load_index(index).entries == []  # and the index is saved without it


def test_counts_by_type_follow_every_change(
    tmp_path: Path, store: mnemod.Store, clock: FixedClock
) -> None:
    """Kept in step with the entries (not counted per snapshot): adds, a change of type,
    a merge, a promotion, a removal and expiry."""

    def recount() -> dict[str, int]:
        found: dict[str, int] = {}
        for entry in store.engine.entries.values():
            found[entry.type] = found.get(entry.type, 0) + 1
        return dict(sorted(found.items()))

    a = store.add("The staging cluster runs in Frankfurt", type="context")
    store.add("The staging cluster runs in Frankfurt now", type="context")  # merged
    b = store.add("User prefers dark mode in every editor", type="preference")
    c = store.add("Deploys wait for the nightly backup", type="insight")
    short = store.add("Sprint 12 ends on Friday", type="progress")
    store.update(b.id, type="insight")
    store.promote(c.id)
    store.remove(a.id)
    assert store.engine.counts_by_type() == recount() == {"insight": 1, "progress": 1}
    clock.advance(timedelta(days=400))
    store.gc()  # expires what is left of L3
    assert store.engine.counts_by_type() == recount()
    store.add("A fresh fact after the sweep", type="relation")
    assert store.engine.counts_by_type() == recount() == {"relation": 1}
    assert short.id not in store.engine.entries
    store.close()
    again = reopen(tmp_path, clock)
    stats = json.loads(again.engine.paths.index.read_text(encoding="utf-8"))["stats"]
    assert stats["by_type"] == again.engine.counts_by_type() == {"relation": 1}
    again.close()


def texts_of(engine: Engine) -> list[str]:
    """The entries' JSON as the next checkpoint would write it."""
    stored = engine.texts.of(engine.entries)
    try:
        return stored.texts()
    finally:
        stored.discard()


def test_kept_texts_follow_the_entries_order_and_resync_if_they_drift(
    store: mnemod.Store,
) -> None:
    from mnemod.files.entry_texts import entry_json

    engine = store.engine
    first = store.add("The cat is called Miso", type="context")
    store.add("The dog is called Bao", type="context")
    store.add("The fish is called Nemo", type="context")
    store.update(first.id, content="The cat is called Miso Soup")
    expected = [entry_json(e) for e in engine.entries.values()]
    assert texts_of(engine) == expected
    assert engine.texts.resynced == 0
    del engine.entries[first.id]  # changed behind its back: the texts must not be trusted
    assert texts_of(engine) == expected[1:]
    assert engine.texts.resynced == 1
    engine.texts.resynced = 0  # the autouse check of every save: this drift was on purpose


def test_a_namespace_without_a_checkpoint_replays_its_l2_changes(
    tmp_path: Path, clock: FixedClock
) -> None:
    """Before its first checkpoint a namespace is its log: a crash then must not let the
    L2 files (behind the log) replace what the log says."""
    store = mnemod.open(tmp_path / "data", clock=clock)
    entry = store.add("The NAS is called vault", type="insight")
    store.promote(entry.id)
    md = tmp_path / "data" / "default" / "l2" / "insight.md"
    behind = md.read_text()
    store.update(entry.id, content="The NAS is called attic")
    store.engine._lock.release()  # type: ignore[union-attr]  # the kernel does this on kill -9
    md.write_text(behind)  # the crash came before the file followed the update
    assert not (tmp_path / "data" / "default" / "l3" / "index.json").exists()
    again = reopen(tmp_path, clock)
    assert again.get(entry.id).content == "The NAS is called attic"
    assert "attic" in md.read_text()
    again.close()


def test_an_l2_file_found_current_at_start_stays_ours_after_the_next_crash(
    tmp_path: Path, clock: FixedClock
) -> None:
    """Written just before a crash (its digest in no record), found current at the next
    start: a crash after the next commit, before the file follows, must not make it look
    like a person's edit (which would undo that commit)."""
    store = mnemod.open(tmp_path / "data", clock=clock)
    first = store.add("The NAS is called vault", type="insight")
    second = store.add("The router is called hedgehog", type="insight")
    store.promote(first.id)
    md = tmp_path / "data" / "default" / "l2" / "insight.md"
    store.engine._lock.release()  # type: ignore[union-attr]  # kill -9 after the write
    again = reopen(tmp_path, clock)  # the file is current: ours
    behind = md.read_text()
    again.promote(second.id)
    again.engine._lock.release()  # type: ignore[union-attr]  # kill -9 before the write...
    md.write_text(behind)  # ...so the file is one promote behind
    third = reopen(tmp_path, clock)
    assert {e.id for e in third.list(layer="l2")} == {first.id, second.id}
    assert second.id in md.read_text()
    third.close()


def test_gc_kept_in_step_plans_what_a_fresh_index_plans(tmp_path: Path, clock: FixedClock) -> None:
    """The engine keeps GC's keyword index in step with every change, so a GC looks only
    from what changed: over rounds of adds, keyword updates, removals and GCs it merges
    exactly what a GC planning from a fresh index of every entry merges."""
    import random

    vocabulary = [f"w{n}" for n in range(14)]
    kept = mnemod.open(tmp_path / "kept", clock=clock)
    fresh = mnemod.open(tmp_path / "fresh", clock=clock)
    rng = random.Random(4)
    gc_merged = 0
    for round_ in range(6):
        ops: list[tuple[str, str, list[str]]] = []
        live = [e.id for e in kept.list(layer="l3")]
        for n in range(25):
            words = rng.sample(vocabulary, rng.randint(3, 6))
            ops.append(("add", f"r{round_}n{n}", words))
        for entry_id in rng.sample(live, min(8, len(live))):
            ops.append(("update", entry_id, rng.sample(vocabulary, rng.randint(3, 6))))
        for entry_id in rng.sample(live, min(3, len(live))):
            ops.append(("remove", entry_id, []))
        for store in (kept, fresh):
            for op, entry_id, words in ops:
                if op == "add":
                    store.add(" ".join(words), keywords=words, id=entry_id)
                elif store.find(entry_id) is not None and op == "update":
                    store.update(entry_id, keywords=words)
                elif store.find(entry_id) is not None:
                    store.remove(entry_id)
        fresh.engine._gc_index = None  # planned from every entry, as an exhaustive pass
        report = kept.gc()
        assert report.as_dict() == fresh.gc().as_dict()
        gc_merged += report.merged
        state = [
            {(e.id, tuple(e.keywords), tuple(e.merged_from)) for e in s.list()}
            for s in (kept, fresh)
        ]
        assert state[0] == state[1], f"round {round_}"
    assert gc_merged > 0  # the updates made near-duplicates that GC merged
    kept.close()
    fresh.close()
