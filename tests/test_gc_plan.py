"""GC merge planning: from the keyword index, and from the entries changed since the last
applied plan, it plans exactly what the exhaustive pass plans.

The reference is the pass GC made before: `domain.dedup.merge_groups` over every live
entry (its candidates from a prefix filter that enumerates every pair sharing a prefix
word, judged by `domain.dedup.compare` with word weights from document frequencies: those
of the whole store from scratch, those the index took, `KeywordIndex.weights`, for a plan
from it), itself checked here against judging every pair."""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemod.config import Config, DedupConfig, PromotionConfig
from mnemod.domain import dedup, size_classes
from mnemod.domain import similar_pairs as similar_pairs_module
from mnemod.domain.gc import GcPlan, examining, merge_rule, mergeable, plan_gc
from mnemod.domain.keywords import jaccard
from mnemod.domain.merge import decide_merge, merge_into
from mnemod.domain.model import Entry
from mnemod.domain.retention import is_expired
from mnemod.domain.similar_pairs import (
    Changes,
    KeywordIndex,
    Settlement,
    WordCounts,
    jaccard_rule,
    merge_groups,
    similar_pairs,
)
from mnemod.domain.steps import run_through

T0 = datetime(2026, 1, 1, tzinfo=UTC)
VOCAB = [f"w{i}" for i in range(10)]
FEW = VOCAB[:6]  # a small vocabulary: many pairs near every threshold
THRESHOLDS = [0.3, 0.4, 0.5, 0.55, 2 / 3, 0.75, 1.0]
RULES = [
    (0.45, 0.45),
    (0.3, 0.45),
    (0.3, 0.3),
    (0.5, 0.6),
    (0.55, 0.55),
    (0.75, 0.9),
]  # floor, threshold


def entry(
    entry_id: str,
    keywords: Iterable[str],
    minute: int = 0,
    type_: str = "context",
    **fields: object,
) -> Entry:
    at = T0 + timedelta(minutes=minute)
    words = list(keywords)
    made = Entry(entry_id, type_, " ".join(words), at, at, at, None, keywords=tuple(words))
    made.tokens = len(words)
    for name, value in fields.items():
        setattr(made, name, value)
    return made


def config(threshold: float = 0.55, policy: str = "manual", floor: float | None = None) -> Config:
    return dataclasses.replace(
        Config(),
        dedup=DedupConfig(threshold=threshold, floor=threshold if floor is None else floor),
        promotion=PromotionConfig(min_accesses=3, policy=policy),
    )


def reference_plan(
    entries: list[Entry], cfg: Config, now: datetime, counts: WordCounts | None = None
) -> GcPlan:
    """The plan as GC made it before the index: the exhaustive pass over every live entry,
    with word weights from `counts` (default: over the live entries)."""
    plan = GcPlan()
    live = [e for e in entries if not is_expired(e, now)]
    plan.expired = [e.id for e in entries if is_expired(e, now)]
    folded: set[str] = set()
    for group in dedup.merge_groups(live, cfg.dedup, counts=counts):
        survivor, *others = group
        taken = mergeable(survivor, others, now)
        if taken:
            plan.merges.append((survivor.id, [o.id for o in taken]))
            folded.update(o.id for o in taken)
    by_id = {e.id: e for e in live}
    accesses = {e.id: e.access_count for e in live}
    for survivor_id, others_ids in plan.merges:
        accesses[survivor_id] += sum(by_id[o].access_count for o in others_ids)
    for e in live:
        if e.id in folded:
            continue
        promotable = e.promotable or accesses[e.id] >= cfg.promotion.min_accesses
        if promotable and not e.promotable:
            plan.newly_promotable.append(e.id)
        if promotable and cfg.promotion.policy == "auto":
            plan.promote.append(e.id)
    return plan


def every_pair(entries: list[Entry], cfg: Config) -> dict[str, dict[str, float]]:
    """The pairs that merge, by judging every same-type pair with the plan's rule."""
    floor, rule = merge_rule(cfg, WordCounts.of(entries))
    similar: dict[str, dict[str, float]] = {}
    for a in entries:
        for b in entries:
            if a.id < b.id and a.type == b.type and jaccard(a.keywords, b.keywords) >= floor:
                score = rule(a, b, jaccard(a.keywords, b.keywords)).score
                if score is not None:
                    similar.setdefault(a.id, {})[b.id] = score
                    similar.setdefault(b.id, {})[a.id] = score
    return similar


def decisions(plan: GcPlan) -> tuple[object, ...]:
    return plan.expired, plan.merges, plan.newly_promotable, plan.promote


def apply(plan: GcPlan, entries: dict[str, Entry], index: KeywordIndex, now: datetime) -> None:
    """What the engine does with a plan (store.gc_run), feeding the index as it must."""
    for entry_id in plan.expired:
        del entries[entry_id]
        index.discard(entry_id)
    for survivor_id, folded_ids in plan.merges:
        survivor = entries[survivor_id]
        for folded_id in folded_ids:
            folded = entries.pop(folded_id)
            merge_into(survivor, folded, now, decide_merge(survivor, folded))
            index.discard(folded_id)
        index.add(survivor)
    for entry_id in plan.newly_promotable:
        entries[entry_id].promotable = True
    for entry_id in plan.promote:
        del entries[entry_id]
        index.discard(entry_id)
    assert plan.settlement is not None
    index.settle(plan.settlement)


def examine(entries: dict[str, Entry], cfg: Config, index: KeywordIndex, now: datetime) -> None:
    """What the engine does after applying a plan (store.gc_run): the entries left marked
    (the merges' survivors) looked from at once, and settled."""
    index.settle(run_through(examining(entries, cfg, now, index)))


SPEC = st.fixed_dictionaries(
    {
        "keywords": st.lists(st.sampled_from(FEW), max_size=6),
        "tail": st.sampled_from(["", "", " not", " 3", " 4"]),  # a guard, a conflict
        "type_": st.sampled_from(["context", "progress"]),
        "minute": st.integers(0, 15),
        "expires": st.none() | st.integers(1, 60),
        "access_count": st.integers(0, 3),
        "promotable": st.booleans(),
    }
)


def make(entry_id: str, spec: dict[str, object]) -> Entry:
    fields = dict(spec)
    expires, tail = fields.pop("expires"), str(fields.pop("tail"))
    made = entry(entry_id, **fields)  # type: ignore[arg-type]
    made.content += tail
    if expires is not None:
        made.expires_at = T0 + timedelta(minutes=int(expires))  # type: ignore[call-overload]
    return made


@settings(max_examples=300, deadline=None)
@given(
    specs=st.lists(SPEC, max_size=30),
    rule=st.sampled_from(RULES),
    policy=st.sampled_from(["manual", "auto"]),
    minute=st.integers(0, 60),
)
def test_a_plan_from_scratch_is_the_exhaustive_plan(
    specs: list[dict[str, object]], rule: tuple[float, float], policy: str, minute: int
) -> None:
    entries = [make(f"E{i:02d}", spec) for i, spec in enumerate(specs)]
    cfg, now = config(rule[1], policy, rule[0]), T0 + timedelta(minutes=minute)
    assert decisions(plan_gc(entries, cfg, now)) == decisions(reference_plan(entries, cfg, now))
    live = [e for e in entries if not is_expired(e, now)]
    by_id = {e.id: e for e in live}
    brute = [[m.id for m in g] for g in merge_groups(every_pair(live, cfg), by_id)]
    assert brute == [[m.id for m in g] for g in dedup.merge_groups(live, cfg.dedup)]


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), SPEC),
        st.tuples(st.just("add"), SPEC),
        st.tuples(st.just("add"), SPEC),
        st.tuples(st.just("change"), st.integers(0, 99), st.lists(st.sampled_from(FEW))),
        st.tuples(st.just("remove"), st.integers(0, 99)),
        st.tuples(st.just("gc"), st.sampled_from(["apply", "examined", "dry", "expire_only"])),
        st.tuples(st.just("rule"), st.sampled_from(RULES)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(
    ops=OPS,
    policy=st.sampled_from(["manual", "auto"]),
    reweigh_at=st.sampled_from([0.0, 0.2, 0.5, math.inf]),
)
def test_plans_from_what_changed_are_the_exhaustive_plans(
    ops: list[tuple[object, ...]], policy: str, reweigh_at: float
) -> None:
    """Adds, keyword changes, removals, applied GC runs (with what they changed examined at
    once, as the engine does, or not), dry ones and rule changes in any order, with word
    counts taken again after any share of changes (or never): every plan from the index
    equals the exhaustive plan of the entries then, with the index's word counts."""
    cfg = config(0.45, policy)
    entries: dict[str, Entry] = {}
    index = KeywordIndex(reweigh_at=reweigh_at)
    now = T0
    made = 0

    def gc(mode: str) -> None:
        current = list(entries.values())
        plan = plan_gc(current, cfg, now, expire_only=mode == "expire_only", index=index)
        expected = reference_plan(current, cfg, now, index.weights)
        if mode == "expire_only":
            assert plan.expired == expected.expired and not plan.merges
        else:
            assert decisions(plan) == decisions(expected)
        if mode in ("apply", "examined"):
            apply(plan, entries, index, now)
        if mode == "examined":
            examine(entries, cfg, index, now)

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
        elif kind == "rule":
            pair = cast(tuple[float, float], op[1])
            cfg = config(pair[1], policy, pair[0])
    gc("examined")
    gc("apply")
    gc("dry")


def test_after_an_applied_plan_only_pairs_with_a_changed_entry_are_looked_at() -> None:
    """… and the pairs refused for now (by a weighted score, which moves with the store)."""
    rng = random.Random(3)
    entries = {
        e.id: e
        for e in (entry(f"E{i:03d}", rng.sample(VOCAB, rng.randint(2, 6)), i) for i in range(200))
    }
    cfg = config(0.5)
    index = KeywordIndex(entries.values())
    plan = plan_gc(list(entries.values()), cfg, T0, index=index)
    assert plan.merges  # the test means something only if the first run merged
    while plan.merges:  # until a run merges nothing
        apply(plan, entries, index, T0)
        plan = plan_gc(list(entries.values()), cfg, T0, index=index)
    apply(plan, entries, index, T0)
    assert plan.settlement is not None
    kept = plan.settlement.keep  # in groups that did not merge: looked from again
    assert set(index.changes(cfg.dedup).ids) == kept

    late = entry("LATE", ["w1", "w2", "w3"], 500)
    entries[late.id] = late
    index.add(late)
    changes = index.changes(cfg.dedup)
    assert set(changes.ids) == {"LATE"} | kept
    looked_at: list[tuple[str, str]] = []
    assert index.weights is not None
    floor, rule = merge_rule(cfg, index.weights)

    def counting(a: Entry, b: Entry, score: float) -> object:
        looked_at.append((a.id, b.id))
        return rule(a, b, score)

    similar_pairs(index, changes, entries, floor, counting)  # type: ignore[arg-type]
    assert looked_at
    for pair in looked_at:
        assert set(pair) & set(changes.ids) or pair in changes.pending


def test_after_what_a_gc_changed_is_examined_the_next_looks_from_new_entries_alone() -> None:
    """A merge's survivor holds the words of all it took, so it may now pair with an entry
    it did not pair with before: examined at once (as the engine does after applying a
    plan), the pairs accepted are kept as pending, and the next plan, looking only from
    the entries added since, is still the exhaustive plan."""
    carried = 0
    for seed in range(60):
        rng = random.Random(seed)
        cfg = config(0.45)
        entries = {
            e.id: e
            for e in (entry(f"E{i:02d}", rng.sample(FEW, rng.randint(1, 5)), i) for i in range(14))
        }
        index = KeywordIndex(entries.values(), reweigh_at=math.inf)
        apply(plan_gc(list(entries.values()), cfg, T0, index=index), entries, index, T0)
        examine(entries, cfg, index, T0)
        assert index.changes(cfg.dedup).ids == ()
        carried += len(index.changes(cfg.dedup).pending)
        for i in range(2):
            new = entry(f"N{i}", rng.sample(FEW, rng.randint(1, 5)), 20 + i)
            entries[new.id] = new
            index.add(new)
        assert set(index.changes(cfg.dedup).ids) == {"N0", "N1"}
        current = list(entries.values())
        plan = plan_gc(current, cfg, T0, index=index)
        assert decisions(plan) == decisions(reference_plan(current, cfg, T0, index.weights))
    assert carried  # the test means something only if some pairs were carried


def run_gc(entries: dict[str, Entry], cfg: Config, index: KeywordIndex) -> GcPlan:
    """A plan from the index, checked against the exhaustive one, then applied."""
    plan = plan_gc(list(entries.values()), cfg, T0, index=index)
    expected = reference_plan(list(entries.values()), cfg, T0, index.weights)
    assert decisions(plan) == decisions(expected)
    apply(plan, entries, index, T0)
    return plan


@pytest.mark.parametrize("reweigh_at", [0.2, math.inf])
def test_a_pair_refused_by_its_weighted_score_is_judged_again_with_new_word_counts(
    reweigh_at: float,
) -> None:
    """Word weights come from document frequencies the index took: two unchanged entries
    refused at one run merge at a later one once the counts are taken again after their
    shared words became rare and the others common; until then the pair is not judged."""
    cfg = config(0.55, floor=0.5)
    a, b = entry("A", ["s1", "s2", "a1"], 0), entry("B", ["s1", "s2", "b1"], 1)
    entries = {"A": a, "B": b}
    index = KeywordIndex(entries.values(), reweigh_at=reweigh_at)
    assert run_gc(entries, cfg, index).merges == []  # plain 0.5, every word weighs 1
    taken = index.weights
    assert index.changes(cfg.dedup).ids == () and not index.changes(cfg.dedup).pending
    for i in range(20):
        other = entry(f"C{i:02d}", ["a1", "b1", f"f{i}a", f"f{i}b", f"f{i}c"], 10 + i)
        entries[other.id] = other
        index.add(other)
    merges = run_gc(entries, cfg, index).merges
    if reweigh_at == math.inf:
        assert index.weights is taken and merges == []
    else:
        assert index.weights is not taken and merges == [("A", ["B"])]


def test_a_group_that_merged_nothing_is_looked_from_again() -> None:
    """S and K are one memory but stay apart (K contradicts S, which says more). When Y,
    similar to S and not to K, comes, the greedy grouping still puts K with S first, so Y
    merges nowhere: a plan that forgot the S–K pair would merge Y into S."""
    cfg = config(0.5)
    s = entry("S", ["ant", "bee", "cat", "dog"], 0, content="ant bee cat dog 3", tokens=4)
    k = entry("K", ["ant", "bee", "cat"], 1, content="ant bee cat 4", tokens=4)
    entries = {"S": s, "K": k}
    index = KeywordIndex(entries.values())
    plan = run_gc(entries, cfg, index)
    assert plan.merges == [] and plan.settlement is not None
    assert plan.settlement.keep == {"S", "K"}
    y = entry("Y", ["ant", "bee", "dog", "yak"], 2, content="ant bee dog yak 3", tokens=4)
    entries["Y"] = y
    index.add(y)
    assert set(index.changes(cfg.dedup).ids) == {"S", "K", "Y"}
    assert run_gc(entries, cfg, index).merges == []
    del entries["K"]
    index.discard("K")
    assert run_gc(entries, cfg, index).merges == [("S", ["Y"])]


def test_settle_keeps_what_changed_after_the_plan_and_what_it_keeps() -> None:
    index = KeywordIndex([entry(i, ["x", i]) for i in "ABC"], reweigh_at=math.inf)
    changes = index.changes("rule")
    assert set(changes.ids) == {"A", "B", "C"}
    index.add(entry("A", ["x", "y", "q"]))  # changed while the plan was applied
    index.settle(Settlement(changes.upto, changes.rule, frozenset("B"), frozenset({("B", "C")})))
    again = index.changes("rule")
    assert set(again.ids) == {"A", "B"} and again.pending == {("B", "C")}
    assert set(index.changes("another rule").ids) == {"A", "B", "C"}
    again = index.changes("rule")  # back: the counts were taken again, every entry
    index.settle(Settlement(again.upto, again.rule, frozenset({"C"})))  # kept: marked again
    assert index.changes("rule").ids == ("C",)


def test_groups_sorted_a_slice_at_a_time_are_the_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    """The entries are sorted by age a few at a time and merged: the same groups, oldest
    first, as one sort of them all."""
    rng = random.Random(5)
    stored = {f"E{i:02d}": entry(f"E{i:02d}", ["x"], rng.randrange(30)) for i in range(40)}
    similar: dict[str, dict[str, float]] = {i: {} for i in stored}
    for _ in range(120):
        a, b = rng.sample(sorted(stored), 2)
        similar[a][b] = similar[b][a] = rng.choice([0.5, 0.6, 0.7])
    whole = merge_groups(similar, stored)
    monkeypatch.setattr(similar_pairs_module, "SORT_STEP", 3)
    assert merge_groups(similar, stored) == whole and len(whole) > 3


def test_settling_in_steps_keeps_what_changes_between_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Settled a few entries at a time: one changed or added between two steps (before or
    after its turn) stays marked, one discarded is forgotten, the rest is settled."""
    monkeypatch.setattr(similar_pairs_module, "SCAN_STEP", 2)
    stored = [entry(f"E{i}", ["x", f"w{i}"]) for i in range(8)]
    index = KeywordIndex(stored, reweigh_at=math.inf)
    changes = index.changes("rule")
    steps = index.settling(Settlement(changes.upto, changes.rule, frozenset({"E7"})))
    next(steps)  # E0, E1 settled
    index.add(entry("E0", ["x", "y"]))  # after its turn
    index.add(entry("E5", ["x", "z"]))  # before it
    index.add(entry("N", ["x", "n"]))  # new
    index.discard("E3")
    for _ in steps:
        pass
    assert set(index.changes("rule").ids) == {"E0", "E5", "N", "E7"}


def test_another_rule_looks_from_every_entry() -> None:
    """A lowered threshold makes pairs of unchanged entries similar: the first plan under
    it looks from every entry."""
    a, b = entry("A", ["w1", "w2", "w3", "a1"], 0), entry("B", ["w1", "w2", "w3", "b1"], 1)
    strict = config(0.9)
    index = KeywordIndex([a, b])
    plan = plan_gc([a, b], strict, T0, index=index)
    assert plan.merges == []
    assert plan.settlement is not None
    index.settle(plan.settlement)
    assert index.changes(strict.dedup).ids == ()
    assert plan_gc([a, b], strict, T0, index=index).merges == []
    lowered = plan_gc([a, b], config(0.5), T0, index=index)
    assert lowered.merges == [("A", ["B"])]


def brute_passing(
    stored: Iterable[Entry], probe: Iterable[str], floor: float, no_larger: bool = False
) -> set[tuple[str, tuple[str, ...], int]]:
    mine = set(probe)
    return {
        (e.id, tuple(dict.fromkeys(e.keywords)), len(mine & set(e.keywords)))
        for e in stored
        if jaccard(mine, e.keywords) >= floor
        and (not no_larger or len(set(e.keywords)) <= len(mine))
    }


@pytest.mark.parametrize("band", [1.0, size_classes.GC_BAND, 2.0])
@pytest.mark.parametrize("dense_share", [1, 4, size_classes.GC_DENSE_SHARE])
def test_passing_is_every_brute_force_match_after_changes(dense_share: int, band: float) -> None:
    """Looked up from sets inside and outside the index, at and above its floor, after
    changes, removals and slots taken again, with words' postings as bitmaps or slots
    and moved between the two as they are held by more or fewer, in a class per set size
    or per band of sizes: exactly the sets with Jaccard ≥ floor are found, each with the
    words it shares, and with `no_larger` those of them no larger."""
    rng = random.Random(11)
    vocabulary = [f"w{i}" for i in range(40)]

    def words() -> list[str]:
        return [*rng.sample(vocabulary, rng.randint(0, 14)), "common"]

    stored = {e.id: e for e in (entry(f"E{i:03d}", words(), i) for i in range(300))}
    index = KeywordIndex(list(stored.values())[:150], dense_share=dense_share, band=band)
    for e in list(stored.values())[150:]:
        index.add(e)
    for e in list(stored.values())[:60]:
        e.keywords = tuple(words())
        index.add(e)
    for e in list(stored.values())[60:120]:
        index.discard(e.id)
        del stored[e.id]
    for i in range(30):  # into the freed slots
        again = entry(f"N{i:03d}", words(), 400 + i)
        stored[again.id] = again
        index.add(again)
    probes = [words() for _ in range(100)]
    for threshold in (0.3, 0.55, 0.8, 1.0):
        for probe in probes:
            found = index.passing(probe, "context", threshold)
            assert len(found) == len(set(found))
            assert set(found) == brute_passing(stored.values(), probe, threshold)
            smaller = index.passing(probe, "context", threshold, no_larger=True)
            assert set(smaller) == brute_passing(stored.values(), probe, threshold, True)


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
    """Sets posted at once and later, looked up at a floor or above, of any size
    or (`no_larger`) of no larger size."""
    stored = [entry(f"F{i:02d}", words) for i, words in enumerate(first)]
    stored += [entry(f"L{i:02d}", words) for i, words in enumerate(later)]
    index = KeywordIndex(stored[: len(first)])
    for e in stored[len(first) :]:
        index.add(e)
    threshold = min(1.0, floor + above)
    for probe in [*probes, *(e.keywords for e in stored)]:
        found = index.passing(probe, "context", threshold)
        assert set(found) == brute_passing(stored, probe, threshold)
        smaller = index.passing(probe, "context", threshold, no_larger=True)
        assert set(smaller) == brute_passing(stored, probe, threshold, no_larger=True)


def test_types_never_pair() -> None:
    a, b = entry("A", ["x", "y"], 0), entry("B", ["x", "y"], 1, type_="progress")
    assert plan_gc([a, b], config(0.5), T0).merges == []
    index = KeywordIndex([a, b])
    changes = Changes(("A", "B"), 2, "rule")
    assert similar_pairs(index, changes, {"A": a, "B": b}, 0.5, jaccard_rule(0.5)) == ({}, set())


@settings(max_examples=300, deadline=None)
@given(
    left=st.lists(st.sampled_from(VOCAB), min_size=1, max_size=20),
    right=st.lists(st.sampled_from(VOCAB), min_size=1, max_size=20),
    threshold=st.sampled_from([0.2, 0.3, 0.368, 0.5]),
)
def test_what_the_penalty_ceiling_refuses_compare_refuses(
    left: list[str], right: list[str], threshold: float
) -> None:
    """GC's rule refuses unread a pair whose score before the penalties cannot reach the
    threshold after the least of them: compare refuses each of those."""
    a, b = dedup.Side.of(entry("A", left)), dedup.Side.of(entry("B", right))
    cfg = DedupConfig(threshold=threshold, floor=0.0)
    plain = jaccard(left, right)
    unworded = dedup.unworded_score(a, b, plain)
    if unworded + dedup.penalty_ceiling(a, b) < threshold - 1e-9:
        assert not dedup.compare(a, b, cfg).merges
