"""Merges keep what the user said: the fuller text survives a repetition, a contradicted text
is superseded and archived (never silently replaced), and every text that leaves the index
is in archive.jsonl and in `mnemod history`."""

from __future__ import annotations

import json
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mnemod
from daemon_proc import DaemonFactory, add_event, index_entries
from helpers import run_cli, wait_until
from mnemod.clock import FixedClock
from mnemod.domain.keywords import extract_keywords
from mnemod.domain.merge import MergeKind, conflicts, decide_merge, merge_into
from mnemod.domain.model import Entry
from mnemod.files.journal import read_jsonl

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
UNITS = "The user prefers metric units and the Asia/Taipei timezone."
TIMEZONE = "User prefers the Asia/Taipei timezone"
TUESDAY = "Deploys go out on Tuesdays after the 10:00 review."
THURSDAY = "Deploys go out on Thursdays after the 10:00 review."
BOTH = "The user likes Python and dislikes Java."
JAVA = "The user likes Java."


def entry(entry_id: str, content: str, minutes: int = 0) -> Entry:
    at = T0 + timedelta(minutes=minutes)
    words = tuple(extract_keywords(content))
    return Entry(entry_id, "preference", content, at, at, at, None,
                 keywords=words, tokens=len(content.split()))  # fmt: skip


def archive_of(data: Path) -> list[dict[str, Any]]:
    return list(read_jsonl(data / "default" / "l3" / "archive.jsonl"))


def live_texts(store: mnemod.Store) -> list[str]:
    return [e.content for e in store.list()]


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(T0)


# -- the rule, pure ---------------------------------------------------------------------------
def test_a_repetition_of_part_keeps_the_fuller_text() -> None:
    decision = decide_merge(entry("OLD", UNITS), entry("NEW", TIMEZONE, 1))
    assert (decision.kind, decision.keep) == (MergeKind.FOLD, "older")
    assert decision.archive == (("newer", "merged into OLD"),)


def test_a_fuller_newer_text_replaces_the_older_which_is_archived() -> None:
    decision = decide_merge(entry("OLD", TIMEZONE), entry("NEW", UNITS, 1))
    assert (decision.kind, decision.keep) == (MergeKind.FOLD, "newer")
    assert decision.archive == (("older", "merged into OLD"),)


def test_a_changed_day_supersedes_the_older_text() -> None:
    decision = decide_merge(entry("OLD", TUESDAY), entry("NEW", THURSDAY, 1))
    assert (decision.kind, decision.keep, decision.conflicts) == (
        MergeKind.SUPERSEDE, "newer", ("days",)
    )  # fmt: skip
    assert decision.archive == (("older", "superseded by NEW"),)
    survivor = merge_into(entry("OLD", TUESDAY), entry("NEW", THURSDAY, 1), T0, decision)
    assert survivor.content == THURSDAY and "tuesday" not in survivor.keywords


def test_a_contradiction_that_would_lose_more_keeps_both() -> None:
    """ "likes Java" contradicts "dislikes Java", but superseding would drop "likes Python"."""
    decision = decide_merge(entry("OLD", BOTH), entry("NEW", JAVA, 1))
    assert (decision.kind, decision.conflicts) == (MergeKind.KEEP_APART, ("negation",))
    assert decision.archive == ()


@pytest.mark.parametrize(
    ("older", "newer", "found"),
    [
        ("Standup at 10:00", "Standup at 11:00", ("numbers",)),
        ("Standup at 10:00", "Standup at 10:00 and 14:00", ()),  # more detail, no contradiction
        ("Rent is due in March", "Rent is due in April", ("days",)),
        ("I may move in June", "I may move in June", ()),  # "may", the verb, is no month
        ("User uses vim", "User doesn't use vim", ("negation",)),
        ("User uses vim", "User never uses vim on Mondays", ("negation",)),
    ],
)
def test_contradictions(older: str, newer: str, found: tuple[str, ...]) -> None:
    assert conflicts(older, newer) == found


# -- the three sequences through the library ---------------------------------------------------
def test_repeating_part_of_a_memory_keeps_the_fuller_one(tmp_path: Path, clock: FixedClock) -> None:
    store = mnemod.open(tmp_path / "data", clock=clock)
    first = store.add(UNITS, type="preference")
    clock.advance(timedelta(minutes=1))
    store.add(TIMEZONE, type="preference")
    assert UNITS in live_texts(store)
    assert TIMEZONE in live_texts(store) or any(  # stored apart, or folded and archived
        r["entry"]["content"] == TIMEZONE for r in archive_of(tmp_path / "data")
    )
    clock.advance(timedelta(minutes=1))
    again = store.add("The user prefers metric units and Asia/Taipei", type="preference")
    assert again.id == first.id and again.content == UNITS  # folded into the fuller text
    archived = archive_of(tmp_path / "data")
    folded = {r["entry"]["content"] for r in archived if r["reason"] == f"merged into {first.id}"}
    assert "The user prefers metric units and Asia/Taipei" in folded  # TIMEZONE may be too
    store.close()


@pytest.mark.process  # runs the CLI
def test_a_changed_deploy_day_supersedes_and_history_shows_the_old(
    tmp_path: Path, clock: FixedClock
) -> None:
    data = tmp_path / "data"
    store = mnemod.open(data, clock=clock)
    tuesday = store.add(TUESDAY, type="context")
    clock.advance(timedelta(minutes=1))
    thursday = store.add(THURSDAY, type="context")
    assert thursday.id == tuesday.id and live_texts(store) == [THURSDAY]
    store.close()
    [record] = archive_of(data)
    assert record["entry"]["content"] == TUESDAY
    assert str(record["reason"]).startswith("superseded by ")
    shown = run_cli(data, "history", tuesday.id).stdout
    assert "archived" in shown and "Tuesdays" in shown and "superseded by" in shown


def test_liking_java_after_disliking_it_keeps_both(tmp_path: Path, clock: FixedClock) -> None:
    store = mnemod.open(tmp_path / "data", clock=clock)
    store.add(BOTH, type="preference")
    clock.advance(timedelta(minutes=1))
    store.add(JAVA, type="preference")
    assert sorted(live_texts(store)) == sorted([BOTH, JAVA])
    store.close()


def test_gc_merges_by_the_same_rules(tmp_path: Path, clock: FixedClock) -> None:
    """Stored apart (dedup off), then merged by GC: the older text is archived, superseded."""
    data = tmp_path / "data"
    apart = mnemod.open(data, clock=clock, config={"dedup": {"threshold": 1.0, "floor": 1.0}})
    tuesday = apart.add(TUESDAY, type="context")
    clock.advance(timedelta(minutes=1))
    apart.add(THURSDAY, type="context")
    apart.add(BOTH, type="preference")
    apart.add("The user likes Python and Java.", type="preference")
    apart.close()
    store = mnemod.open(data, clock=clock)
    report = store.gc()
    assert report.merged == 1
    assert sorted(live_texts(store)) == sorted([THURSDAY, BOTH, "The user likes Python and Java."])
    store.close()
    [record] = archive_of(data)
    assert (record["entry"]["id"], record["entry"]["content"]) == (tuesday.id, TUESDAY)
    assert str(record["reason"]).startswith("superseded by ")


# -- through a real daemon -------------------------------------------------------------------
def test_the_daemon_archives_a_superseded_text(daemons: DaemonFactory) -> None:
    data = daemons.data_dir()
    proc = daemons.daemon(data).start()
    client = daemons.client(proc.url_from_stdout())
    proc.wait_log("daemon.running")
    add_event(client, TUESDAY, id="deploys", type="context")
    wait_until(lambda: [e["id"] for e in index_entries(data)] == ["deploys"], 10)
    add_event(client, THURSDAY, type="context")
    wait_until(lambda: [e["content"] for e in index_entries(data)] == [THURSDAY], 10)
    [record] = wait_until(lambda: archive_of(data), 10)  # derived from the log right after
    assert record["entry"]["content"] == TUESDAY
    assert "Tuesdays" in run_cli(data, "history", "deploys").stdout


# -- properties ------------------------------------------------------------------------------
WORDS = ["user", "likes", "prefers", "deploys", "Tuesdays", "Thursdays", "March", "10:00",
         "11:00", "3", "not", "never", "Java", "Python", "metric", "units", "review"]  # fmt: skip
texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=7).map(" ".join)


@given(older=texts, newer=texts)
def test_a_merge_never_loses_a_text(older: str, newer: str) -> None:
    """Whatever the texts, each is the survivor's or archived, unless both stay apart; a
    supersede needs a contradiction, and the fuller older text is kept over a repetition."""
    old, new = entry("OLD", older), entry("NEW", newer, 1)
    decision = decide_merge(old, new)
    if decision.kind is MergeKind.KEEP_APART:
        assert decision.conflicts
        return
    texts_of = {"older": older, "newer": newer}
    archived = {texts_of[role] for role, _ in decision.archive}
    survivor = merge_into(entry("OLD", older), new, T0, decision)
    assert {older, newer} <= archived | {survivor.content}
    assert survivor.id == "OLD"
    if decision.kind is MergeKind.SUPERSEDE:
        assert decision.conflicts and survivor.content == newer
    elif set(new.keywords) <= set(old.keywords):
        assert survivor.content == older


@settings(max_examples=15, deadline=None)
@given(sequence=st.lists(texts, min_size=1, max_size=6))
def test_no_text_ever_leaves_both_the_index_and_the_archive(sequence: list[str]) -> None:
    """Every text added, through dedup on add and then GC, is live or archived."""
    with tempfile.TemporaryDirectory() as folder:
        clock = FixedClock(T0)
        store = mnemod.open(Path(folder) / "data", clock=clock)
        for text in sequence:
            store.add(text, type="context")
            clock.advance(timedelta(minutes=1))
        store.gc()
        live = set(live_texts(store))
        store.close()
        archived = {r["entry"]["content"] for r in archive_of(Path(folder) / "data")}
        assert set(sequence) <= live | archived


@pytest.mark.process  # runs the CLI
def test_dedupe_report_says_why_each_candidate_would_or_would_not_merge(
    tmp_path: Path, clock: FixedClock
) -> None:
    data = tmp_path / "data"
    apart = mnemod.open(data, clock=clock, config={"dedup": {"threshold": 1.0, "floor": 1.0}})
    tuesday = apart.add(TUESDAY, type="context")
    clock.advance(timedelta(minutes=1))
    thursday = apart.add(THURSDAY, type="context")
    uses = apart.add("User uses vim for editing", type="preference")
    never = apart.add("User never uses vim for editing", type="preference")
    apart.close()
    rows = json.loads(run_cli(data, "dedupe", "--report", "--json").stdout)
    by_pair = {(r["a"], r["b"]): r for r in rows}
    deploy = by_pair[(tuesday.id, thursday.id)]
    assert deploy["would_merge"] and deploy["refused_by"] is None
    assert deploy["merge"]["kind"] == "supersede" and deploy["merge"]["conflicts"] == ["days"]
    vim = by_pair[(uses.id, never.id)]
    assert (vim["would_merge"], vim["refused_by"]) == (False, "negation")
    assert vim["score"] >= vim["threshold"]
    text = run_cli(data, "dedupe", "--report").stdout
    assert f"merge {tuesday.id} ~ {thursday.id}" in text and "supersede (days)" in text
    assert f"keep  {uses.id} ~ {never.id}" in text and "refused: one negates, the other not" in text


@pytest.mark.process  # runs the CLI
def test_dedupe_report_shows_the_wording_term(tmp_path: Path, clock: FixedClock) -> None:
    """A sentence copied with a clause added passes the keywords and lengths; the report
    says the wording term refused it, and by how much."""
    night = "The deploy pipeline runs the integration tests against the staging cluster every night"
    data = tmp_path / "data"
    store = mnemod.open(data, clock=clock)
    first = store.add(f"{night}.", type="context")
    clock.advance(timedelta(minutes=1))
    second = store.add(f"{night} and pages the on-call engineer.", type="context")
    store.close()
    assert first.id != second.id  # kept apart on add
    rows = json.loads(run_cli(data, "dedupe", "--report", "--json").stdout)
    row = next(r for r in rows if {r["a"], r["b"]} == {first.id, second.id})
    assert row["refused_by"] == "score" and row["wording"] < 0
    text = run_cli(data, "dedupe", "--report").stdout
    assert f"(wording {row['wording']:+.3f}" in text and "< threshold" in text
