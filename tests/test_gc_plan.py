"""GC merge planning: from the keyword index, and from the entries changed since the last
applied plan, it plans exactly what the exhaustive pass plans.

The reference is the pass GC made before: `domain.dedup.merge_groups` over every live
entry (its candidates from a prefix filter that enumerates every pair sharing a prefix
word), itself checked here against comparing every pair."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemod.config import Config, DedupConfig, PromotionConfig
from mnemod.domain import dedup
from mnemod.domain.gc import GcPlan, plan_gc
from mnemod.domain.keywords import jaccard
from mnemod.domain.merge import merge_into
from mnemod.domain.model import Entry
from mnemod.domain.retention import is_expired
from mnemod.domain.similar_pairs import (
    KeywordIndex,
    jaccard_rule,
    merge_groups,
    prefix_length,
    similar_pairs,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
VOCAB = [f"w{i}" for i in range(10)]
FEW = VOCAB[:6]  # a small vocabulary: many pairs near every threshold
THRESHOLDS = [0.3, 0.4, 0.5, 0.55, 2 / 3, 0.75, 1.0]


def entry(
    entry_id: str,
    keywords: Iterable[str],
    minute: int = 0,
    type_: str = "context",
    **fields: object,
) -> Entry:
    at = T0 + timedelta(minutes=minute)
    words = list(keywords)
    made = Entry(entry_id, type_, " ".join(words), at, at, at, None, keywords=words)
    for name, value in fields.items():
        setattr(made, name, value)
    return made


def config(threshold: float = 0.55, policy: str = "manual") -> Config:
    return dataclasses.replace(
        Config(),
        dedup=DedupConfig(threshold=threshold),
        promotion=PromotionConfig(min_accesses=3, policy=policy),
    )


def reference_plan(entries: list[Entry], cfg: Config, now: datetime) -> GcPlan:
    """The plan as GC made it before the index: the exhaustive pass over every live entry."""
    plan = GcPlan()
    live = [e for e in entries if not is_expired(e, now)]
    plan.expired = [e.id for e in entries if is_expired(e, now)]
    folded: set[str] = set()
    for group in dedup.merge_groups(live, cfg.dedup.threshold):
        survivor, *others = group
        plan.merges.append((survivor.id, [o.id for o in others]))
        folded.update(o.id for o in others)
    by_id = {e.id: e for e in live}
    counts = {e.id: e.access_count for e in live}
    for survivor_id, others_ids in plan.merges:
        counts[survivor_id] += sum(by_id[o].access_count for o in others_ids)
    for e in live:
        if e.id in folded:
            continue
        promotable = e.promotable or counts[e.id] >= cfg.promotion.min_accesses
        if promotable and not e.promotable:
            plan.newly_promotable.append(e.id)
        if promotable and cfg.promotion.policy == "auto":
            plan.promote.append(e.id)
    return plan


def every_pair(entries: list[Entry], threshold: float) -> dict[str, dict[str, float]]:
    """Similar pairs by comparing every same-type pair."""
    similar: dict[str, dict[str, float]] = {}
    for i, a in enumerate(entries):
        for b in entries[i + 1 :]:
            score = jaccard(a.keywords, b.keywords)
            if a.type == b.type and score >= threshold:
                similar.setdefault(a.id, {})[b.id] = score
                similar.setdefault(b.id, {})[a.id] = score
    return similar


def decisions(plan: GcPlan) -> tuple[object, ...]:
    return plan.expired, plan.merges, plan.newly_promotable, plan.promote


def apply(plan: GcPlan, entries: dict[str, Entry], index: KeywordIndex, now: datetime) -> None:
    """What the engine does with a plan (runtime.bulk.run_gc), feeding the index as it must."""
    for entry_id in plan.expired:
        del entries[entry_id]
        index.discard(entry_id)
    for survivor_id, folded_ids in plan.merges:
        survivor = entries[survivor_id]
        for folded_id in folded_ids:
            merge_into(survivor, entries.pop(folded_id), now)
            index.discard(folded_id)
        index.add(survivor)
    for entry_id in plan.newly_promotable:
        entries[entry_id].promotable = True
    for entry_id in plan.promote:
        del entries[entry_id]
        index.discard(entry_id)
    assert plan.changes is not None
    index.settle(plan.changes)


SPEC = st.fixed_dictionaries(
    {
        "keywords": st.lists(st.sampled_from(FEW), max_size=6),
        "type_": st.sampled_from(["context", "progress"]),
        "minute": st.integers(0, 15),
        "expires": st.none() | st.integers(1, 60),
        "access_count": st.integers(0, 3),
        "promotable": st.booleans(),
    }
)


def make(entry_id: str, spec: dict[str, object]) -> Entry:
    fields = dict(spec)
    expires = fields.pop("expires")
    made = entry(entry_id, **fields)  # type: ignore[arg-type]
    if expires is not None:
        made.expires_at = T0 + timedelta(minutes=int(expires))  # type: ignore[call-overload]
    return made


@settings(max_examples=300, deadline=None)
@given(
    specs=st.lists(SPEC, max_size=30),
    threshold=st.sampled_from(THRESHOLDS),
    policy=st.sampled_from(["manual", "auto"]),
    minute=st.integers(0, 60),
)
def test_a_plan_from_scratch_is_the_exhaustive_plan(
    specs: list[dict[str, object]], threshold: float, policy: str, minute: int
) -> None:
    entries = [make(f"E{i:02d}", spec) for i, spec in enumerate(specs)]
    cfg, now = config(threshold, policy), T0 + timedelta(minutes=minute)
    assert decisions(plan_gc(entries, cfg, now)) == decisions(reference_plan(entries, cfg, now))
    live = [e for e in entries if not is_expired(e, now)]
    by_id = {e.id: e for e in live}
    brute = [[m.id for m in g] for g in merge_groups(every_pair(live, threshold), by_id)]
    assert brute == [[m.id for m in g] for g in dedup.merge_groups(live, threshold)]


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), SPEC),
        st.tuples(st.just("add"), SPEC),
        st.tuples(st.just("add"), SPEC),
        st.tuples(st.just("change"), st.integers(0, 99), st.lists(st.sampled_from(FEW))),
        st.tuples(st.just("remove"), st.integers(0, 99)),
        st.tuples(st.just("gc"), st.sampled_from(["apply", "dry", "expire_only"])),
        st.tuples(st.just("threshold"), st.sampled_from(THRESHOLDS)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(ops=OPS, policy=st.sampled_from(["manual", "auto"]))
def test_plans_from_what_changed_are_the_exhaustive_plans(
    ops: list[tuple[object, ...]], policy: str
) -> None:
    """Adds, keyword changes, removals, applied and dry GC runs and threshold changes in
    any order: every plan from the index equals the exhaustive plan of the entries then."""
    cfg = config(0.55, policy)
    entries: dict[str, Entry] = {}
    index = KeywordIndex(cfg.dedup.threshold)
    now = T0
    made = 0

    def gc(mode: str) -> None:
        current = list(entries.values())
        plan = plan_gc(current, cfg, now, expire_only=mode == "expire_only", index=index)
        expected = reference_plan(current, cfg, now)
        if mode == "expire_only":
            assert plan.expired == expected.expired and not plan.merges
        else:
            assert decisions(plan) == decisions(expected)
        if mode == "apply":
            apply(plan, entries, index, now)

    for op in ops:
        kind = op[0]
        if kind == "add":
            new = make(f"E{made:03d}", op[1])  # type: ignore[arg-type]
            made += 1
            entries[new.id] = new
            index.add(new)
        elif kind == "change" and entries:
            changed = list(entries.values())[int(op[1]) % len(entries)]  # type: ignore[call-overload]
            changed.keywords = list(op[2])  # type: ignore[call-overload]
            index.add(changed)
        elif kind == "remove" and entries:
            removed = list(entries)[int(op[1]) % len(entries)]  # type: ignore[call-overload]
            del entries[removed]
            index.discard(removed)
        elif kind == "gc":
            gc(str(op[1]))
            now += timedelta(minutes=7)
        elif kind == "threshold":
            cfg = config(float(op[1]), policy)  # type: ignore[arg-type]
    gc("apply")
    gc("dry")


def test_after_an_applied_plan_only_pairs_with_a_changed_entry_are_looked_at() -> None:
    rng = random.Random(3)
    entries = {
        e.id: e
        for e in (entry(f"E{i:03d}", rng.sample(VOCAB, rng.randint(2, 6)), i) for i in range(200))
    }
    cfg = config(0.5)
    index = KeywordIndex(0.5, entries.values())
    plan = plan_gc(list(entries.values()), cfg, T0, index=index)
    assert plan.merges  # the test means something only if the first run merged
    apply(plan, entries, index, T0)
    survivors = {survivor for survivor, _ in plan.merges}
    assert set(index.changes(cfg.dedup).ids) == survivors  # changed by their merges
    index.settle(index.changes(cfg.dedup))

    late = entry("LATE", ["w1", "w2", "w3"], 500)
    entries[late.id] = late
    index.add(late)
    assert index.changes(cfg.dedup).ids == ("LATE",)
    looked_at: list[tuple[str, str]] = []

    def counting(a: Entry, b: Entry, score: float) -> float | None:
        looked_at.append((a.id, b.id))
        return score

    found = similar_pairs(index, index.changes(cfg.dedup).ids, entries, 0.5, counting)
    assert looked_at and all("LATE" in pair for pair in looked_at)
    assert set(found) == {"LATE", *every_pair(list(entries.values()), 0.5).get("LATE", {})}


def test_settle_keeps_what_changed_after_the_plan() -> None:
    index = KeywordIndex(0.55, [entry("A", ["x", "y"]), entry("B", ["x", "z"])])
    changes = index.changes("rule")
    assert set(changes.ids) == {"A", "B"}
    index.add(entry("A", ["x", "y", "q"]))  # changed while the plan was applied
    index.settle(changes)
    assert index.changes("rule").ids == ("A",)


def test_another_rule_looks_from_every_entry() -> None:
    """A lowered threshold makes pairs of unchanged entries similar: the first plan under
    it looks from every entry, and the index is posted again for the lower floor."""
    a, b = entry("A", ["w1", "w2", "w3", "a1", "a2"], 0), entry("B", ["w1", "w2", "w3", "b1"], 1)
    strict = config(0.9)
    index = KeywordIndex(0.9, [a, b])
    plan = plan_gc([a, b], strict, T0, index=index)
    assert plan.merges == []
    assert plan.changes is not None
    index.settle(plan.changes)
    assert index.changes(strict.dedup).ids == ()
    assert plan_gc([a, b], strict, T0, index=index).merges == []
    lowered = plan_gc([a, b], config(0.5), T0, index=index)
    assert lowered.merges == [("A", ["B"])]
    assert index.floor == 0.5


def test_a_floor_below_the_index_own_is_refused_or_posted_for() -> None:
    """Its prefixes are too short for a lower floor: `candidates` refuses it, and the add
    path's `most_similar` (after a reload lowered the threshold) posts the index again."""
    index = KeywordIndex(0.6, [entry("A", ["x", "y"])])
    with pytest.raises(ValueError, match="below"):
        index.candidates(["x"], "context", 0.5)
    assert index.most_similar(["x"], "context", 0.5) == ("A", 0.5)
    assert index.floor == 0.5


def test_candidates_hold_every_brute_force_match_after_changes() -> None:
    """Looked up from sets inside and outside the index, at and above its floor, after
    changes, removals and a new order: nothing with Jaccard ≥ floor is missed, and
    `most_similar` finds the best match that comparing with every entry finds."""
    rng = random.Random(11)
    vocabulary = [f"w{i}" for i in range(40)]

    def words() -> list[str]:
        return [*rng.sample(vocabulary, rng.randint(0, 14)), "common"]

    stored = {e.id: e for e in (entry(f"E{i:03d}", words(), i) for i in range(300))}
    index = KeywordIndex(0.3, list(stored.values())[:150])
    for e in list(stored.values())[150:]:
        index.add(e)  # met after the order was fixed: its new words rank first
    for e in list(stored.values())[:60]:
        e.keywords = words()
        index.add(e)
    for e in list(stored.values())[60:80]:
        index.discard(e.id)
        del stored[e.id]
    probes = [words() for _ in range(100)]
    for reorder in (False, True):
        if reorder:
            index.reorder(0.3)
        for threshold in (0.3, 0.55, 0.8, 1.0):
            for probe in probes:
                scores = {i: jaccard(probe, e.keywords) for i, e in stored.items()}
                passing = {i for i, score in scores.items() if score >= threshold}
                assert passing <= set(index.candidates(set(probe), "context", threshold))
                best = index.most_similar(set(probe), "context", threshold)
                if not passing:
                    assert best is None
                else:
                    assert best is not None and best[1] == max(scores[i] for i in passing)
                    assert best[0] == min(i for i in passing if scores[i] == best[1])


WORDS = st.lists(st.sampled_from(VOCAB), max_size=10)


@settings(max_examples=300, deadline=None)
@given(
    first=st.lists(WORDS, max_size=25),
    later=st.lists(WORDS, max_size=25),
    probes=st.lists(WORDS, min_size=1, max_size=5),
    floor=st.sampled_from(THRESHOLDS),
    above=st.sampled_from([0.0, 0.1, 0.3]),
)
def test_no_set_reaching_the_floor_is_missed(
    first: list[list[str]],
    later: list[list[str]],
    probes: list[list[str]],
    floor: float,
    above: float,
) -> None:
    """Sets posted when the order was fixed and after it (ranked as new words), looked up
    at the index's floor or above, of any size or (`no_larger`) of no larger size."""
    stored = [entry(f"F{i:02d}", words) for i, words in enumerate(first)]
    stored += [entry(f"L{i:02d}", words) for i, words in enumerate(later)]
    index = KeywordIndex(floor, stored[: len(first)])
    for e in stored[len(first) :]:
        index.add(e)
    threshold = min(1.0, floor + above)
    for probe in [*probes, *(e.keywords for e in stored)]:
        mine = set(probe)
        passing = {e.id for e in stored if jaccard(mine, e.keywords) >= threshold}
        assert passing <= set(index.candidates(mine, "context", threshold))
        smaller = {i for i in passing if len(index.held[i]) <= len(mine)}
        assert smaller <= set(index.candidates(mine, "context", threshold, no_larger=True))


def test_only_a_prefix_is_posted() -> None:
    """Memory: about half of each set's words at the default threshold, not all."""
    index = KeywordIndex(0.55, [entry("A", [f"w{i}" for i in range(20)])])
    assert index.posted_length(20) == prefix_length(20, 0.55) + 1 == 11
    assert sum(len(ids) for _, ids in index._postings.values()) == 11


def test_types_never_pair() -> None:
    a, b = entry("A", ["x", "y"], 0), entry("B", ["x", "y"], 1, type_="progress")
    assert plan_gc([a, b], config(0.5), T0).merges == []
    index = KeywordIndex(0.5, [a, b])
    assert similar_pairs(index, ["A", "B"], {"A": a, "B": b}, 0.5, jaccard_rule(0.5)) == {}
