"""Maintenance in slices: a GC made and applied a step at a time while the entries change
between steps stays exact (the index's next plan is the exhaustive one), leaves a group
that changed since its plan for the next run, and, in the writer, lets requests be
answered and events applied while it is in progress (seen by the order things happen,
not by timing)."""

from __future__ import annotations

import dataclasses
import gc
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import mnemod
from daemon_proc import Client as RedisClient
from mnemod.client import Client
from mnemod.config import HotConfig
from mnemod.domain.gc import plan_gc
from mnemod.domain.model import Entry
from mnemod.domain.retention import retention_score
from mnemod.domain.validation import NewEntry
from mnemod.runtime import hot_refresh, maintenance
from mnemod.runtime.commands import Command
from mnemod.store import gc_run
from mnemod.store.engine import Engine
from mnemod.store.gc_run import GcRun
from mnemod.store.recovery import read_committed
from test_gc_plan import decisions, reference_plan
from test_writer import running_writer

T0 = datetime(2026, 1, 1, tzinfo=UTC)
VOCAB = [f"w{i}" for i in range(12)]
LONG = {"ttl": {"context": "3650d", "max_lifetime": "3650d"}}


def made(entry_id: str, words: list[str], minute: int) -> Entry:
    at = T0 + timedelta(minutes=minute)
    entry = Entry(entry_id, "context", " ".join(words), at, at, at, None, keywords=tuple(words))
    entry.tokens = len(words)
    return entry


def stored(folder: Path, rng: random.Random, count: int) -> Iterator[Engine]:
    """A store of `count` entries over a small vocabulary (many near-duplicates), put in
    as `import` puts them: no dedup on the way in."""
    store = mnemod.open(folder, config=LONG)
    entries = [made(f"E{i:04d}", rng.sample(VOCAB, rng.randint(2, 6)), i) for i in range(count)]
    store.engine.restore([("l3", e) for e in entries])
    try:
        yield store.engine
    finally:
        store.close()


def exact(engine: Engine, now: datetime) -> None:
    """The next plan from the engine's GC index is the exhaustive plan with its counts."""
    current = list(engine.entries.values())
    index = engine.gc_index()
    plan = plan_gc(current, engine.config, now, index=index)
    assert decisions(plan) == decisions(reference_plan(current, engine.config, now, index.weights))


@pytest.mark.parametrize("seed", range(3))
def test_a_gc_in_steps_with_changes_between_them_leaves_the_index_exact(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    for engine in stored(tmp_path, rng, 250):
        now = engine.clock.now()
        with engine.batch():  # committed once, at the end
            gc_twice_with_changes_between_steps(engine, rng, now)


def gc_twice_with_changes_between_steps(engine: Engine, rng: random.Random, now: datetime) -> None:
    """From scratch, then from what changed: adds, keyword changes and removals between
    every two steps of each run."""
    for _ in range(2):
        run = GcRun(engine, now, dry_run=False, by="gc", expire_only=False)
        while not run.run(0.0):  # one step at a time
            ids = list(engine.entries)
            choice = rng.random()
            if choice < 0.3:
                words = rng.sample(VOCAB, rng.randint(2, 6))
                engine.add(NewEntry(" ".join(words), keywords=words))
            elif choice < 0.6 and ids:
                engine.update(rng.choice(ids), {"keywords": rng.sample(VOCAB, 3)})
            elif choice < 0.7 and ids:
                engine.remove(rng.choice(ids))
        assert run.report is not None and run.report.merged > 0
        exact(engine, now)


def test_a_gc_slice_ends_once_its_changes_are_enough_to_commit(tmp_path: Path) -> None:
    """The daemon commits after each slice: a slice that folded many groups made one long
    commit. Each run of a GC with `changes_per_run` leaves at most that many changed
    entries and one step's more (`APPLY_STEP` folds: a survivor and a folded entry each)."""
    for engine in stored(tmp_path, random.Random(4), 250):
        run = GcRun(engine, engine.clock.now(), False, "gc", False, changes_per_run=4)
        engine.drain_changes()  # the store's restore
        most = 0
        while not run.run(60.0):
            most = max(most, len(engine.drain_changes()))
        assert run.report is not None and run.report.merged > 20
        assert 4 <= most <= 4 + 2 * gc_run.APPLY_STEP


def test_a_group_changed_after_its_plan_is_left_for_the_next_run(tmp_path: Path) -> None:
    store = mnemod.open(tmp_path, config=LONG)
    engine = store.engine
    a, b = made("A", ["ant", "bee", "cat"], 0), made("B", ["ant", "bee", "cat", "dog"], 1)
    engine.restore([("l3", a), ("l3", b)])
    now = engine.clock.now()
    run = GcRun(engine, now, dry_run=False, by="gc", expire_only=False)
    while run.plan is None:
        run.run(0.0)
    assert run.plan.merges == [("A", ["B"])]
    engine.update("B", {"tags": ["changed"]})  # after the plan, before it is applied
    run.run(None)
    assert run.report is not None and run.report.merged == 0
    assert set(engine.entries) == {"A", "B"}
    again = engine.gc()
    assert again.merged == 1 and set(engine.entries) == {"A"}
    store.close()


def test_requests_are_answered_and_events_applied_while_a_gc_is_in_progress(
    tmp_path: Path,
    redis_server: str,
    redis_client: RedisClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = random.Random(5)
    for engine in stored(tmp_path, rng, 400):
        expected = engine.gc(dry_run=True).merged
    assert expected > 0
    monkeypatch.setattr(maintenance, "SLICE_SECONDS", 0.0)  # a slice is one step
    with running_writer(tmp_path, redis_client) as writer:
        writer.run_command(Command("gc"))
        writer.step(100)
        assert writer.maintenance.busy  # the GC is in progress
        with Client(redis_server) as agent:
            agent.add("The cat is named Miso", type="preference")
        redis_client.xadd(
            writer.keys.rpc,
            {"op": "resolve", "prompt": "what is the cat called?", "reply_to": "t:r"},
        )
        answered = applied = False
        while writer.maintenance.busy:
            result = writer.step(100)
            applied = applied or result.applied > 0
            answered = answered or redis_client.llen("t:r") == 1
            if answered and applied:
                break
        assert answered and applied and writer.maintenance.busy  # before the GC was done
        steps = 0
        while writer.maintenance.busy:
            writer.step(100)
            steps += 1
        assert steps > 1  # in many slices
        report = writer.job_results["gc"]
        assert report["merged"] == expected and report["slices"] > steps
        # each slice was committed through the change log as it was applied
        committed = read_committed(writer.engine.paths).entries
        assert len(committed) == len(writer.engine.entries) == 400 + 1 - expected


@pytest.fixture
def collector_watched() -> Iterator[list[int]]:
    """The generation of every collection the cyclic collector makes, from a frozen heap
    (the daemon freezes its own after start-up) with low thresholds, so that a full pass
    comes soon; the collector as it was afterwards."""
    generations: list[int] = []

    def seen(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            generations.append(info["generation"])

    thresholds, was = gc.get_threshold(), gc.isenabled()
    gc.collect()
    gc.freeze()
    gc.collect()  # over nothing: a full pass is due as soon as anything survives
    gc.set_threshold(50, 2, 2)
    gc.enable()
    gc.callbacks.append(seen)
    try:
        yield generations
    finally:
        gc.callbacks.remove(seen)
        gc.set_threshold(*thresholds)
        gc.unfreeze()
        (gc.enable if was else gc.disable)()


def test_no_full_collection_runs_while_a_gc_is_in_progress(
    tmp_path: Path,
    redis_client: RedisClient,
    monkeypatch: pytest.MonkeyPatch,
    collector_watched: list[int],
) -> None:
    """A full pass scans the GC's index and plan (at 100,000 entries, 100-150 ms of a
    request's wait); the young generations are still collected after every slice."""
    for _ in stored(tmp_path, random.Random(7), 300):
        pass
    monkeypatch.setattr(maintenance, "SLICE_SECONDS", 0.0)  # a slice is one step
    with running_writer(tmp_path, redis_client) as writer:
        while writer.engine.cold:  # the indexes built (then frozen) in idle slices first
            writer.step(0)
        writer.run_command(Command("gc"))
        collector_watched.clear()
        while writer.maintenance.busy:
            writer.step(0)
        during = list(collector_watched)
        assert writer.job_results["gc"]["merged"] > 0
    assert during and 2 not in during  # young collections only
    assert gc.isenabled()  # as it was before the job


def test_a_gc_in_one_go_makes_no_full_collection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, collector_watched: list[int]
) -> None:
    """The library's and the CLI's GC: young collections between stretches of it, nothing
    frozen (the caller's heap is its own), the collector as it was after."""
    monkeypatch.setattr(gc_run, "YOUNG_EVERY", 0.0)  # a young collection after every step
    gc.unfreeze()  # what earlier tests froze may be freed meanwhile, and the count go down
    for engine in stored(tmp_path, random.Random(7), 300):
        collector_watched.clear()
        report = engine.gc()
        during = list(collector_watched)
        assert gc.get_freeze_count() == 0
    assert report.merged > 0 and during and 2 not in during
    assert gc.isenabled()


def test_the_hot_refresh_in_slices_puts_the_best_scores_in_force(
    tmp_path: Path, redis_client: RedisClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scores drift (here: importances changed behind the hot layer's back, as decay does):
    the refresh, a slice at a time, leaves Redis holding exactly the best `max_entries`,
    the others' items gone, while an entry removed meanwhile is not written back."""
    rng = random.Random(9)
    for _ in stored(tmp_path, rng, 40):
        pass
    monkeypatch.setattr(maintenance, "SLICE_SECONDS", 0.0)
    monkeypatch.setattr(hot_refresh, "SCORE_STEP", 7)
    monkeypatch.setattr(hot_refresh, "WRITE_STEP", 2)
    with running_writer(tmp_path, redis_client) as writer:
        engine = writer.engine
        engine.config = dataclasses.replace(engine.config, hot=HotConfig(max_entries=5))
        writer.hot.rebuild(engine)
        before = set(redis_client.zrange(writer.keys.hot, 0, -1))
        assert len(before) == 5
        for entry in engine.entries.values():
            entry.importance = 5 if entry.id not in before else 1
            engine.texts.forget(entry.id)  # the checkpoint is told, the hot layer is not
        writer.run_command(Command("hot_refresh"))
        writer.step(100)
        assert writer.maintenance.busy
        removed = next(i for i in engine.entries if i not in before)
        engine.remove(removed)  # while the refresh is in progress
        writer.commit(force=True)
        while writer.maintenance.busy:
            writer.step(100)
        now = engine.clock.now()
        best = sorted(
            engine.entries.values(),
            key=lambda e: (-retention_score(engine.config.ttl, e, now), e.id),
        )[:5]
        assert set(redis_client.zrange(writer.keys.hot, 0, -1)) == {e.id for e in best}
        assert not redis_client.exists(*(writer.keys.item(i) for i in before))
        assert not redis_client.exists(writer.keys.item(removed))
        assert writer.job_results["hot_refresh"]["slices"] > 1
