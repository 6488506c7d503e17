"""The dedup lookup's candidates: bitsets, size classes, and the floor met exactly."""

from __future__ import annotations

import random
from array import array
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from mnemod.domain.model import Entry
from test_dedup import entry


@given(
    st.lists(st.tuples(st.frozensets(st.integers(0, 300)), st.booleans()), max_size=12),
    st.integers(0, 13),
)
def test_the_members_of_enough_sets_are_counted(
    sets: list[tuple[frozenset[int], bool]], needed: int
) -> None:
    """What the lookup's candidates are made of: the slots at least `needed` sets hold,
    some sets given as bitmaps, the others as lists of their members (the count stops
    early when no slot can reach `needed`)."""
    from collections import Counter

    from mnemod.domain.bitsets import from_members, held_by, members

    counted = Counter(i for each, _ in sets for i in each)
    expected = sorted(i for i, n in counted.items() if n >= max(1, needed))
    assert [sorted(members(from_members(each))) for each, _ in sets] == [sorted(e) for e, _ in sets]
    bitmaps = [from_members(each) for each, as_bitmap in sets if as_bitmap]
    lists = [array("I", sorted(each)) for each, as_bitmap in sets if not as_bitmap]
    assert held_by(bitmaps, lists, needed) == expected


@given(st.lists(st.frozensets(st.integers(0, 40)), max_size=40), st.integers(0, 41))
def test_counts_past_the_planes_held_in_names_are_exact(
    sets: list[frozenset[int]], needed: int
) -> None:
    """Many bitmaps over few members: counts of 16 and more carry into the planes above the
    four the count holds in local names (bitsets.summed)."""
    from collections import Counter

    from mnemod.domain.bitsets import counted, from_members, held_by, summed

    bitmaps = [from_members(each) for each in sets]
    assert summed(bitmaps) == counted(bitmaps)
    counts = Counter(i for each in sets for i in each)
    expected = sorted(i for i, n in counts.items() if n >= max(1, needed))
    assert held_by(bitmaps, [], needed) == expected


KEYWORD_SETS = st.lists(st.sampled_from([f"w{i}" for i in range(6)]), max_size=5)
# a few common words and many rare ones, in sets of sizes that share a band (up to 12)
SKEWED_SETS = st.lists(
    st.one_of(st.sampled_from(["c0", "c1", "c2"]), st.sampled_from([f"r{i}" for i in range(14)])),
    max_size=12,
)


@given(
    st.lists(
        st.tuples(
            st.integers(0, 30),
            st.one_of(KEYWORD_SETS, SKEWED_SETS),
            st.sampled_from(["context", "fact"]),
        ),
        min_size=5,
        max_size=80,
    ),
    st.one_of(KEYWORD_SETS, SKEWED_SETS),
    st.sampled_from([0.2, 0.45, 0.5, 0.75, 1.0]),
    st.sampled_from([1, 2, 3, 64]),
    st.sampled_from([1.0, 1.3, 2.0]),
)
def test_the_lookup_passes_exactly_the_entries_at_the_floor(
    changes: list[tuple[int, list[str], str]],
    probe: list[str],
    floor: float,
    dense: int,
    band: float,
) -> None:
    """Whatever was added, changed and taken out before (slots freed and taken again,
    postings turned from arrays to bitmaps and back), the lookup's candidates are the
    entries of the probe's type whose plain keyword Jaccard with it reaches the floor, each
    with the words it shares: what comparing with every entry finds, with a class per set
    size or per band of sizes (the lookup's own, GC_BAND, and a wider one)."""
    from mnemod.store.lookup import Lookup

    lookup = Lookup(dense_share=dense, band=band)  # small shares: both forms of postings
    held: dict[str, Entry] = {}
    for number, keywords, kind in changes:
        at = f"E{number:02d}"
        if at in held and number % 3 == 0:  # some go, the others are indexed again
            lookup.discard(held.pop(at))
            continue
        held[at] = replace(entry(at, keywords), type=kind)
        lookup.add(held[at])
    for words in [probe, *(e.keywords for e in held.values())]:  # every stored set too
        mine = frozenset(words)
        found = {
            other: (frozenset(listed), shared)
            for other, listed, shared in lookup._passing("context", mine, floor)
        }
        expected = {
            e.id: (frozenset(e.keywords), len(mine & set(e.keywords)))
            for e in held.values()
            if e.type == "context"
            and (shared := len(mine & set(e.keywords)))
            and shared / len(mine | set(e.keywords)) >= floor - 1e-9
        }
        assert found == expected


@settings(max_examples=40)
@given(st.randoms(use_true_random=False), st.sampled_from([2, 4, 8]))
def test_a_size_class_holds_each_words_slots(rng: random.Random, dense: int) -> None:
    """Adds and removals in any order: each word's postings (a bitmap or an array, as the
    share of the class holding it goes up and down) hold exactly the slots of its holders."""
    from mnemod.domain.bitsets import members
    from mnemod.domain.size_classes import SizeClass

    home = SizeClass(dense)
    holders: dict[int, tuple[str, ...]] = {}
    vocabulary = [f"w{i}" for i in range(10)]
    for number in range(100):
        if rng.random() < 0.5 or not holders:
            words = tuple(rng.sample(vocabulary, rng.randint(0, 3)))
            holders[home.add(f"E{number}", words)] = words
        else:
            slot = rng.choice(sorted(holders))
            home.remove(slot)
            del holders[slot]
        for word in vocabulary:
            posted = home.slots(word) or array("I")
            slots = members(posted) if isinstance(posted, int) else sorted(posted)
            assert slots == sorted(s for s, held in holders.items() if word in held)
    assert len(home) == len(holders)


@settings(max_examples=200)
@given(st.integers(0, 2**32), st.sampled_from([0.1, 0.2, 0.382, 0.5, 0.8]))
def test_the_lookup_scoring_best_bound_first_finds_what_scoring_every_one_finds(
    seed: int, threshold: float
) -> None:
    """`Lookup.similar` scores its candidates lazily (best balance first, then best score
    before penalties) and stops once no bound left can reach the best found: it must return
    the very entry and score that judging every stored entry returns, the lowest id of
    those that tie (many do here: few words, repeated sets and lengths)."""
    from collections import Counter

    from mnemod.config import DedupConfig
    from mnemod.domain.dedup import ProbeWeights, Side, compare
    from mnemod.domain.text_cues import negated
    from mnemod.store.lookup import Lookup

    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(7)]

    def made(entry_id: str) -> Entry:
        made = entry(entry_id, rng.sample(vocabulary, rng.randint(1, 6)))
        made.tokens = rng.randint(1, 30)
        if rng.random() < 0.3:
            made.content = f"not {made.content}"
        return made

    entries = {f"E{i:02d}": made(f"E{i:02d}") for i in range(rng.randint(1, 60))}
    new = made("P")
    lookup = Lookup()
    for each in entries.values():
        lookup.add(each)
    config = DedupConfig(threshold=threshold, floor=min(threshold, 0.3))
    mine = frozenset(new.keywords)
    holding = Counter(w for e in entries.values() for w in set(e.keywords))
    weights = ProbeWeights(mine, holding.__getitem__, len(entries) - 1)
    side = Side(mine, new.content, new.tokens, negated(new.content))
    best: tuple[float, str] | None = None
    for other_id, other in entries.items():
        verdict = compare(side, Side.of(other), config, weights)
        if verdict.merges and (best is None or (-verdict.score, other_id) < (-best[0], best[1])):
            best = (verdict.score, other_id)
    found = lookup.similar(new, entries, config)
    assert (None if found is None else (found[1], found[0].id)) == best
