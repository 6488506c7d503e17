"""Keywords, Jaccard, merge rules, and merges that never chain."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnemod.config import DedupConfig
from mnemod.domain import inflections
from mnemod.domain import text_cues as cues
from mnemod.domain.dedup import (
    CLAUSE_UNREAD,
    FIGURES_PENALTY,
    NEGATION_CREDIT,
    OPTIONAL_TECHNIQUES,
    TECHNIQUES,
    WORDING_CENTRE,
    PairWeights,
    Side,
    clause,
    compare,
    figures,
    jaccard_floor,
    merge_groups,
    unworded_score,
    wording,
)
from mnemod.domain.keywords import extract_keywords, jaccard
from mnemod.domain.merge import decide_merge, merge_into
from mnemod.domain.model import Entry
from mnemod.domain.rewordings import aligned
from mnemod.tokens import token_counter

T0 = datetime(2026, 1, 1, tzinfo=UTC)
JACCARD_ONLY = frozenset[str]()  # no weights, no balance, no guards: the plain set rule


def plain(threshold: float) -> DedupConfig:
    return DedupConfig(threshold=threshold, floor=threshold)


def entry(entry_id: str, keywords: list[str], minutes: int = 0, **fields: Any) -> Entry:
    at = T0 + timedelta(minutes=minutes)
    return Entry(
        entry_id,
        "context",
        " ".join(keywords),
        at,
        at,
        at,
        None,
        keywords=tuple(keywords),
        **fields,
    )


def test_keywords_are_unicode_aware() -> None:
    assert extract_keywords("Le café est naïve; 日本語 too") == [
        "le",
        "café",
        "est",
        "naïve",
        "日本",
        "本語",
    ]
    assert "caf" not in extract_keywords("café")
    assert extract_keywords("User likes TypeScript") == ["user", "like", "typescript"]
    assert extract_keywords("the THE The") == []


def test_unspaced_scripts_become_character_pairs() -> None:
    """Chinese, Japanese and Korean runs are indexed as overlapping pairs, so that a
    sentence is not one word; other words in the same text stay words."""
    assert extract_keywords("使用者喜歡喝烏龍茶") == [
        "使用", "用者", "者喜", "喜歡", "歡喝", "喝烏", "烏龍", "龍茶"
    ]  # fmt: skip
    assert extract_keywords("iPhone手機殼 and 茶") == ["iphone", "手機", "機殼", "茶"]
    assert extract_keywords("東京タワー") == ["東京", "京タ", "タワ", "ワー"]
    same = jaccard(extract_keywords("使用者喜歡喝烏龍茶"), extract_keywords("使用者很喜歡喝烏龍茶"))
    other = jaccard(extract_keywords("使用者喜歡喝烏龍茶"), extract_keywords("使用者住在台北市"))
    assert same >= DedupConfig().threshold > other


def test_typescript_pair_passes_default_threshold() -> None:
    a = extract_keywords("User likes TypeScript")
    b = extract_keywords("User likes TypeScript a lot")
    assert jaccard(a, b) >= 0.55


def test_chain_is_not_merged_into_one_group() -> None:
    # A~B (3/4) and B~C (3/4) but A≁C (2/5): two memories, not one.
    a = entry("A", ["w1", "w2", "w3"], 0)
    b = entry("B", ["w1", "w2", "w3", "w4"], 1)
    c = entry("C", ["w2", "w3", "w4"], 2)
    assert jaccard(a.keywords, b.keywords) >= 0.55
    assert jaccard(b.keywords, c.keywords) >= 0.55
    assert jaccard(a.keywords, c.keywords) < 0.55
    groups = merge_groups([a, b, c], plain(0.55), JACCARD_ONLY)
    assert [[m.id for m in g] for g in groups] == [["A", "B"]]


def test_a_clique_is_merged_whole() -> None:
    a = entry("A", ["x", "y", "z"], 0)
    b = entry("B", ["x", "y", "z"], 1)
    c = entry("C", ["x", "y", "z", "q"], 2)
    groups = merge_groups([c, b, a], plain(0.55), JACCARD_ONLY)
    assert [[m.id for m in g] for g in groups] == [["A", "B", "C"]]


def test_merge_rules() -> None:
    old = entry("OLD", ["a", "b"], 0, importance=2, access_count=2, tags=["t1"])
    new = entry("NEW", ["b", "c"], 5, importance=4, access_count=1, tags=["t2"], merged_from=["X"])
    new.content = "newest content"
    decision = decide_merge(old, new)
    assert decision.keep == "newer"  # the newer says something the older does not
    merged = merge_into(old, new, T0 + timedelta(hours=1), decision)
    assert merged.id == "OLD"
    assert merged.content == "newest content"
    assert merged.importance == 4
    assert merged.keywords == ("a", "b", "c")
    assert merged.tags == ("t1", "t2")
    assert merged.access_count == 3
    assert merged.merged_from == ("NEW", "X")


def test_prefix_filter_finds_exactly_the_brute_force_pairs() -> None:
    import random

    from mnemod.domain.dedup import candidate_pairs

    rng = random.Random(7)
    vocabulary = [f"w{i}" for i in range(30)]
    entries = [
        entry(f"E{i:03d}", [*rng.sample(vocabulary, rng.randint(1, 8)), "common"], i)
        for i in range(150)
    ]
    for threshold in (0.3, 0.55, 0.8):
        brute = {
            (a.id, b.id)
            for i, a in enumerate(entries)
            for b in entries[i + 1 :]
            if jaccard(a.keywords, b.keywords) >= threshold
        }
        assert {(c.a, c.b) for c in candidate_pairs(entries, threshold)} == brute


def test_the_lookup_finds_the_brute_force_best_match_on_add() -> None:
    """`Lookup.similar` reads only the sizes that can still pass at each prefix word, and
    with counts leaves out sets whose hits cannot pass; it must find what comparing with
    every entry finds, after changes too, word weights included."""
    import random
    from collections import Counter

    from mnemod.store.lookup import Lookup

    rng = random.Random(11)
    vocabulary = [f"w{i}" for i in range(40)]
    stored = {
        e.id: e
        for e in (
            entry(f"E{i:03d}", [*rng.sample(vocabulary, rng.randint(1, 14)), "common"], i)
            for i in range(300)
        )
    }
    lookups = [Lookup()]
    for lookup in lookups:
        for e in stored.values():
            lookup.add(e)
    for e in list(stored.values())[:100]:  # changed keywords: indexed again
        for lookup in lookups:
            lookup.discard(e)
        e.keywords = (*rng.sample(vocabulary, rng.randint(1, 14)), "common")
        for lookup in lookups:
            lookup.add(e)
    for e in stored.values():
        e.tokens = rng.randint(5, 12)
    probes = [entry(f"P{i}", rng.sample(vocabulary, rng.randint(1, 14))) for i in range(200)]
    for e in [*stored.values(), *probes]:  # some negate: the guard and the credit are read
        if rng.random() < 0.3:
            e.content = f"not {e.content}"
    frequency = Counter(w for e in stored.values() for w in set(e.keywords))
    for threshold in (0.3, 0.55, 0.8, 1.0):
        config = DedupConfig(threshold=threshold * 0.8, floor=threshold)
        for probe in probes:
            probe.tokens = rng.randint(5, 12)
            passing = []
            for e in stored.values():
                words = frozenset(e.keywords)

                def holding(word: str, words: frozenset[str] = words) -> int:
                    return frequency[word] - (word in words)

                verdict = compare(Side.of(probe), Side.of(e), config, PairWeights(holding, 299))
                if verdict.merges:
                    passing.append((verdict.score, e.id))
            best = max((score for score, _ in passing), default=None)
            for lookup in lookups:
                found = lookup.similar(probe, stored, config)
                if best is None:
                    assert found is None
                else:
                    assert found is not None and round(found[1], 9) == round(best, 9)
                    # the best-scoring entry, the lowest id of those that tie
                    tied = sorted(i for score, i in passing if abs(score - best) < 1e-9)
                    assert found[0].id in tied[: 1 if len(tied) == 1 else None]


WORDS = st.frozensets(st.sampled_from([f"w{i}" for i in range(12)]), min_size=1)
SIDES = st.builds(
    Side.read, WORDS, st.sampled_from(["a b", "not a b", "a 10 b"]), st.integers(0, 30)
)


@given(SIDES, SIDES, st.floats(0.05, 1.0), st.floats(0.05, 1.0), st.integers(0, 50),
       st.sets(st.sampled_from(sorted(TECHNIQUES | OPTIONAL_TECHNIQUES))))  # fmt: skip
def test_every_merge_reaches_the_jaccard_floor(
    a: Side, b: Side, floor: float, threshold: float, others: int, used: set[str]
) -> None:
    """The contract candidate finders rely on: whatever the weights, lengths and guards, a
    pair that merges has keyword Jaccard ≥ `jaccard_floor`."""
    config = DedupConfig(threshold=threshold, floor=floor)
    verdict = compare(a, b, config, PairWeights(lambda w: len(w) % 3, others), used)
    if verdict.merges:
        assert jaccard(a.words, b.words) >= jaccard_floor(config) - 1e-9


COUNT = token_counter("cl100k_base").count


def side(text: str) -> Side:
    return Side.read(frozenset(extract_keywords(text)), text, COUNT(text))


def test_two_texts_that_both_negate_earn_the_credit() -> None:
    """Saying no to the same thing is a cue both share that their keywords hide (stopwords
    drop "not"): the weighted Jaccard gains NEGATION_CREDIT, at most 1, before the balance,
    so the score stays within the balance; the verdict reads it from `negates`, which dedup
    on add may leave for the guard to read (None)."""
    a, b = (
        side("The user does not want email alerts at night"),
        side("User never wants night alerts"),
    )
    assert a.negates and b.negates
    jaccard_ab = jaccard(a.words, b.words)
    unread = unworded_score(a._replace(negates=False), b._replace(negates=False), jaccard_ab)
    balance = min(a.length, b.length) / max(a.length, b.length)
    credited = unworded_score(a, b, jaccard_ab)
    assert credited == pytest.approx(min(balance, unread + NEGATION_CREDIT * balance))
    assert unworded_score(a, b._replace(negates=None), jaccard_ab) == credited
    loose = DedupConfig(threshold=0.01, floor=0.01)  # the verdict says what the credit added
    assert compare(a, b, loose).both_negate == pytest.approx(credited - unread)
    assert compare(a, b, loose, techniques=TECHNIQUES - {"both_negate"}).both_negate == 0.0
    yes = side("User wants night alerts")
    assert compare(a, yes._replace(negates=None), DedupConfig()).refused_by in {"negation", "score"}


def test_a_sentence_copied_with_a_clause_added_is_another_memory() -> None:
    """The keywords and lengths alone pass these; the wording (the first words copied word
    for word, then a clause with more to say) refuses them."""
    night = "The deploy pipeline runs the integration tests against the staging cluster every night"
    monday = "The council approved the new budget for the city schools on Monday"
    for text, more in [
        (f"{night}.", f"{night} and pages the on-call engineer."),
        (f"{monday}.", f"{monday}, and the mayor vetoed it."),
    ]:
        a, b = side(text), side(more)
        assert compare(a, b, DedupConfig(), techniques=TECHNIQUES - {"wording"}).merges
        assert wording(a, b) < 0
        assert compare(a, b, DedupConfig()).refused_by == "score"


def test_a_reworded_sentence_keeps_its_score() -> None:
    """The same words inflected and reordered ("meeting"/"meetings", "moved"/"were
    moved by") are a paraphrase: no wording penalty."""
    a = side("The team moved the weekly planning meeting to Thursday mornings at the main office.")
    b = side(
        "The weekly planning meetings were moved by the team to Thursday morning in the main"
        " office."
    )
    assert wording(a, b) == 0.0
    assert compare(a, b, DedupConfig()).merges


def test_short_texts_are_judged_without_their_wording() -> None:
    """A few words have no phrasing to read: the term is 0 and the rule is the keyword one."""
    a, b = side("User likes TypeScript"), side("User likes TypeScript a lot")
    assert wording(a, b) == 0.0
    assert compare(a, b, DedupConfig()).merges


VOCABULARY = [
    "the",
    "a",
    "of",
    "to",
    "not",
    "plan",
    "plans",
    "planned",
    "cat",
    "cats",
    "dog",
    "ran",
]
TEXTS = st.lists(st.sampled_from(VOCABULARY), min_size=1, max_size=12).map(" ".join)


@given(TEXTS, TEXTS, st.integers(0, 30), st.integers(0, 30), st.floats(0.05, 1.0))
def test_the_wording_only_lowers_the_score(
    a_text: str, b_text: str, a_length: int, b_length: int, threshold: float
) -> None:
    """What `Lookup.similar` relies on to skip candidates of far other lengths: the score
    is at most the length balance, so a pair whose balance is below the threshold never
    merges; the wording penalty stays in its bounds."""
    a = Side.read(frozenset(extract_keywords(a_text)), a_text, a_length)
    b = Side.read(frozenset(extract_keywords(b_text)), b_text, b_length)
    config = DedupConfig(threshold=threshold, floor=0.05)
    assert -WORDING_CENTRE - 0.5 - 1e-9 <= wording(a, b) <= 0.0
    longer = max(a_length, b_length)
    balance = min(a_length, b_length) / longer if longer else 1.0
    verdict = compare(a, b, config, PairWeights(lambda w: len(w) % 3, 20))
    assert verdict.score <= balance + 1e-9 or not verdict.merges
    if verdict.merges:
        assert balance >= threshold - 1e-9


def test_unspaced_near_duplicates_still_merge() -> None:
    """A CJK run is one "word" to the word pattern: the wording reads its character pairs,
    so a long near-duplicate in Chinese is not refused for its phrasing."""
    a = side("使用者喜歡喝烏龍茶，每天早上都會泡一壺")
    b = side("使用者很喜歡喝烏龍茶，每天早上都會泡一壺")
    assert a.length >= 15  # long enough for the wording to count fully
    assert compare(a, b, DedupConfig()).merges


def test_unshared_words_agreeing_in_their_first_letters_are_aligned() -> None:
    """ "purchased" and "purchase" are one word for the score; a head two words of the other
    text share is ambiguous and aligns nothing."""
    a, b = frozenset({"park", "purchased", "land"}), frozenset({"park", "purchase", "land"})
    assert aligned(a, b) == a
    assert aligned(frozenset({"planted", "planning"}), frozenset({"plants"})) == {"planted"}
    assert aligned(frozenset({"planted", "planter"}), frozenset({"plants"})) == {"plants"}
    assert aligned(frozenset({"planted"}), frozenset({"planned", "dog"})) == {"planned", "dog"}
    one = side("The park service purchased the land.")
    other = side("The park service purchase land.")
    lifted = compare(one, other, DedupConfig()).score
    assert lifted > compare(one, other, DedupConfig(), techniques=TECHNIQUES - {"alignment"}).score


def test_a_word_in_another_form_is_aligned_as_one() -> None:
    """Forms that differ before their fifth letter, or words too short to have five, are
    one word for the score when their inflections fold to one key: irregular forms by the
    table, -ed and -ing by rule, and a month by its abbreviation."""
    for forms in (("said", "say", "saying"), ("posted", "posting", "post"),
                  ("bought", "buy"), ("made", "make", "making"), ("tried", "trying", "try"),
                  ("planned", "plan"), ("used", "use", "using"), ("sept", "september"),
                  ("children", "child")):  # fmt: skip
        assert len({inflections.key(form) for form in forms}) == 1, forms
    for apart in (("called", "cal"), ("missed", "mis"), ("plant", "planned"), ("sing", "s")):
        assert inflections.key(apart[0]) != inflections.key(apart[1]), apart
    said, says = frozenset({"council", "said", "budget"}), frozenset({"council", "say", "budget"})
    assert aligned(said, says) == said
    posted = frozenset({"posted", "price"})
    assert aligned(posted, frozenset({"posting", "price"})) == posted
    one = side("The city council said on Monday that it posted the school budget online.")
    other = side("The city council says it posts the school budget online on Monday.")
    jaccard = compare(one, other, DedupConfig()).jaccard
    assert jaccard == pytest.approx(0.6)
    assert unworded_score(one, other, jaccard, techniques={"alignment"}) == 1.0


def test_a_clause_said_by_one_text_only_costs_the_clause_penalty() -> None:
    """The same sentence with a clause added passes the keywords, the lengths and the
    wording; the run of words the shorter text has none of refuses it."""
    text = "The city council approved the new budget for the public schools and libraries on Monday"
    a, b = side(f"{text}."), side(f"{text}, though the mayor vowed a veto.")
    assert cues.unshared_run(b.text, a.text, a.words) == 6
    assert cues.unshared_run(a.text, b.text, b.words) == 0
    assert clause(a, b) == clause(b, a) < 0
    assert compare(a, b, DedupConfig(), techniques=TECHNIQUES - {"clauses"}).merges
    verdict = compare(a, b, DedupConfig())
    assert verdict.refused_by == "score" and verdict.clause == clause(a, b)
    reworded = side("The weekly planning meetings were moved to Thursday morning.")
    moved = side("The weekly planning meeting moved to Thursday mornings.")
    # "were": a rewording, no clause
    assert cues.unshared_run(reworded.text, moved.text, moved.words) <= 2


def test_short_texts_are_held_to_the_bar_of_before_the_clause_penalty() -> None:
    """Too few words to show a clause: the pair pays what the threshold was lowered by."""
    a = side("The office wifi password rotates every month")
    b = side("The office wifi password rotates each quarter now")
    assert clause(a, b) == -CLAUSE_UNREAD
    assert compare(a, b, DedupConfig(threshold=DedupConfig().threshold + CLAUSE_UNREAD),
                   techniques=TECHNIQUES - {"clauses"}).refused_by == "score"  # fmt: skip
    assert compare(a, b, DedupConfig()).refused_by == "score"


def test_numbers_that_differ_cost_the_figures_penalty() -> None:
    a = side("The backup server has 16 cores and 64 GB of memory in the rack.")
    b = side("The backup server in the rack has 32 cores and 64 GB of memory.")
    same = side("The backup server in the rack has 16 cores and 64 GB of memory.")
    assert compare(a, b, DedupConfig()).figures == -FIGURES_PENALTY  # 16 out, 32 in
    assert compare(a, same, DedupConfig()).figures == 0.0


def test_a_figure_only_added_is_free_and_each_further_one_costs() -> None:
    """One number more on one side is more detail; each number beyond the first that one
    text has and the other lacks costs the figures penalty."""
    a = side("The backup server has 16 cores and plenty of memory in the rack.")
    added = side("The backup server has 16 cores and 64 GB of memory in the rack.")
    more = side("The backup server has 16 cores, 64 GB of memory and 8 disks in the rack.")
    changed = side("The backup server has 32 cores, 64 GB of memory and 8 disks in the rack.")
    assert figures(a, added) == 0.0
    assert figures(a, more) == -FIGURES_PENALTY
    assert figures(a, changed) == pytest.approx(-3 * FIGURES_PENALTY)


def test_negation_is_read_in_any_case_and_as_whole_words() -> None:
    """ASCII text is lowercased before the search, other text searched ignoring case: both
    read the same negations."""
    for text in ("User does NOT use vim", "User doesn't use vim", "User doesn’t use vim",
                 "Never on Mondays", "Der Café-Nutzer does NOT use vim"):  # fmt: skip
        assert cues.negated(text), text
    for text in ("A notable note", "Nobody's fault", "Café notables", "Knot"):
        assert not cues.negated(text), text


NEGATION_PIECES = [
    *("not", "no", "never", "hate", "hated", "without", "knot", "note", "n't", "n’t"),
    *("'", "’", "_", "é", "s", "Not", "NEVER", "dislikes", " ", ",", "."),
]


@given(st.lists(st.sampled_from(NEGATION_PIECES), max_size=8).map("".join))
def test_negation_is_found_as_a_search_for_the_whole_words_finds_it(text: str) -> None:
    """The negation search starts at the words' first letters (for speed); it finds what a
    search for the whole words (between word boundaries, with no apostrophe after) and for
    "n't" finds, in ASCII and in other text."""
    words = "|".join(sorted(cues.NEGATIONS))
    whole = re.compile(rf"\b(?:{words})\b(?!['’])|n['’]t\b", re.IGNORECASE)
    assert cues.negated.__wrapped__(text) == (whole.search(text) is not None)


def test_a_score_given_before_the_penalties_is_the_one_read() -> None:
    """Dedup on add passes each candidate's unworded score, which bounded it, to `compare`:
    the verdict is the one `compare` reaches on its own, and the score given is used."""
    a = side("The deploy runs every Tuesday after the morning review of the release.")
    b = side("Every Tuesday the deploy runs after the morning release review.")
    alone = compare(a, b, DedupConfig())
    given_score = compare(a, b, DedupConfig(), unworded=unworded_score(a, b, alone.jaccard))
    assert given_score == alone
    lowered = compare(a, b, DedupConfig(), unworded=0.0)
    assert lowered.refused_by == "score" and lowered.score == 0.0
