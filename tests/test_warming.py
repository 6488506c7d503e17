"""The engine's indexes built after open (store.warming): however the build is sliced and
whatever changes meanwhile, dedup and resolve answer as on a store opened afresh."""

from __future__ import annotations

import gc
import random
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import mnemod
from mnemod.clock import FixedClock
from mnemod.store.engine import Engine

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
WORDS = ["cat", "dog", "tea", "coffee", "Taipei", "Berlin", "piano", "guitar", "Tuesday"]
WORDS += ["Friday", "garden", "rain"]
WORDS += [a + b for a in ("ka", "lo", "mi", "ren", "tas", "vo") for b in ("dun", "pra", "sel")]
PROMPTS = ["what does the cat drink?", "music on Tuesday", "Berlin rain", "kadun lopra"]


def sentence(rng: random.Random) -> str:
    return "User " + " ".join(rng.sample(WORDS, rng.randint(3, 6)))


def answers(engine: Engine, now: datetime) -> list[tuple[str, list[str]]]:
    out = []
    for prompt in PROMPTS:
        result = engine.resolve(prompt, 120, now=now, record_access=False)
        out.append((result.text, [item.id for item in result.items]))
    return out


def test_sliced_build_with_changes_between_equals_a_build_at_open(tmp_path: Path) -> None:
    """The same changes on two copies of a store: one built its indexes before them (as an
    open did), the other in slices between them."""
    rng = random.Random(5)
    clock = FixedClock(T0)
    store = mnemod.open(tmp_path / "a", clock=clock)
    for n in range(300):
        clock.advance(timedelta(minutes=1))
        store.add(sentence(rng), id=f"e{n:04d}")
    store.close()
    shutil.copytree(tmp_path / "a", tmp_path / "b")

    def run(folder: Path, slices: float) -> tuple[int, list[tuple[str, list[str]]]]:
        moment = FixedClock(clock.now())
        changes = random.Random(7)
        opened = mnemod.open(folder, clock=moment)
        engine = opened.engine
        assert engine.indexes.cold  # nothing built by the open
        ids = list(engine.entries)
        steps = 0
        with engine.batch():
            while engine.indexes.cold or steps < 12:
                engine.warm(slices)
                steps += 1
                moment.advance(timedelta(minutes=1))
                pick = changes.choice(ids)
                if pick in engine.entries:
                    if steps % 4 == 0:
                        opened.update(pick, content=sentence(changes))
                    elif steps % 4 == 1:
                        opened.access(pick)
                    elif steps % 4 == 2:
                        opened.remove(pick)
                opened.add(sentence(changes), id=f"n{steps:04d}")
            opened.promote(next(iter(engine.entries)))
        found = answers(engine, moment.now() + timedelta(hours=1))
        opened.close()
        return steps, found

    sliced_steps, sliced = run(tmp_path / "a", 0.0)
    built_steps, built = run(tmp_path / "b", float("inf"))
    assert sliced_steps > 3 and sliced_steps == built_steps  # the build really was sliced
    assert sliced == built


def test_adds_during_the_build_merge_as_on_a_built_store(tmp_path: Path) -> None:
    rng = random.Random(9)
    clock = FixedClock(T0)
    store = mnemod.open(tmp_path / "a", clock=clock)
    for _ in range(200):
        clock.advance(timedelta(minutes=1))
        store.add(sentence(rng))
    store.close()
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    probes = [sentence(rng) for _ in range(60)]

    def outcomes(folder: Path, slices: float) -> list[tuple[str, str]]:
        moment = FixedClock(clock.now())
        opened = mnemod.open(folder, clock=moment)
        out = []
        for probe in probes:
            opened.engine.warm(slices)
            moment.advance(timedelta(minutes=1))
            entry = opened.add(probe)
            out.append((opened.engine.last_outcome, entry.content))
        opened.close()
        return out

    assert outcomes(tmp_path / "a", 0.0) == outcomes(tmp_path / "b", float("inf"))


def test_a_removed_entry_leaves_resolve_at_once(tmp_path: Path) -> None:
    """A removal is noted while the entry is still in the state: resolve's view kept it
    (and selected it) until the next open."""
    store = mnemod.open(tmp_path, clock=FixedClock(T0))
    kept = store.add("The cat is named Miso")
    gone = store.add("The dog is named Bao")
    assert {i.id for i in store.resolve("what are the pets named?", budget=200).items} == {
        kept.id,
        gone.id,
    }
    store.remove(gone.id)
    assert [i.id for i in store.resolve("what are the pets named?", budget=200).items] == [kept.id]
    store.close()


def test_what_the_first_use_builds_is_built_with_the_collector_off(tmp_path: Path) -> None:
    """Resolve's view and the dedup postings built when first needed: no cyclic collection
    while they are built, a full one after (store.heap.built_whole), the collector on again
    as it was. With its thresholds at their lowest, the collector on made a full pass every
    few objects of the build."""
    rng = random.Random(3)
    clock = FixedClock(T0)
    store = mnemod.open(tmp_path, clock=clock)
    for n in range(200):
        clock.advance(timedelta(minutes=1))
        store.add(sentence(rng), id=f"e{n:04d}")
    store.close()
    store = mnemod.open(tmp_path, clock=clock)
    indexes = store.engine.indexes
    calling = [""]  # the call under way
    during: list[str] = []  # what was being built when a full pass started
    after: list[str] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase != "start" or info["generation"] != 2:
            return
        if calling[0] == "resolve" and not indexes.recall_built:
            during.append("view")
        elif calling[0] == "similar" and not indexes.postings_built:
            during.append("postings")
        else:
            after.append(calling[0])

    thresholds, was_enabled = gc.get_threshold(), gc.isenabled()
    gc.enable()
    gc.set_threshold(1, 1, 1)
    gc.callbacks.append(count)
    try:
        calling[0] = "resolve"
        store.engine.resolve(PROMPTS[0], 120, now=clock.now(), record_access=False)
        calling[0] = "similar"
        store.engine.similar(next(iter(store.engine.entries.values())))
        calling[0] = ""
        enabled = gc.isenabled()
    finally:
        gc.callbacks.remove(count)
        gc.set_threshold(*thresholds)
        (gc.enable if was_enabled else gc.disable)()
        store.close()
    assert indexes.recall_built and indexes.postings_built
    assert during == []
    assert {"resolve", "similar"} <= set(after)  # each build's pass at its end
    assert enabled
