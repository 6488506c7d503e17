"""Resolve: the budget is a hard ceiling, tiers come in order, triggers are safe, traces explain."""

from __future__ import annotations

import itertools
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemod.domain.candidates import Candidate
from mnemod.domain.framing import note_line
from mnemod.domain.ranking import RankingSettings, with_neighbours
from mnemod.domain.resolve import Resolver
from mnemod.tokens import TokenCounter, token_counter

NOW = datetime(2024, 6, 1, 12, 0, tzinfo=UTC)
T0 = datetime(2024, 5, 1, 9, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return token_counter("cl100k_base")


def mem(
    id: str,
    content: str,
    *,
    layer: str = "l3",
    tier: str = "cold",
    triggers: tuple[str, ...] = (),
    once: bool = False,
    importance: int = 3,
    at: datetime = T0,
    access_count: int = 0,
) -> Candidate:
    return Candidate(
        id=id,
        layer=layer,  # type: ignore[arg-type]
        type="context",
        content=content,
        created_at=at,
        last_accessed_at=at,
        tier=tier,
        triggers=triggers,
        once=once,
        importance=importance,
        access_count=access_count,
        key=id,
    )


def resolver_with(counter: TokenCounter, *items: Candidate) -> Resolver:
    resolver = Resolver(counter)
    for item in items:
        resolver.upsert(item)
    return resolver


def ids(result: object) -> list[str]:
    return [c.id for c in result.items]  # type: ignore[attr-defined]


def pool_sizes_searched(resolver: Resolver, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The k of every top-k search the resolver runs from now on (filled in as it goes)."""
    searches: list[int] = []
    top_k = resolver.index.top_k

    def spy(words: list[str], k: int, exclude: frozenset[str] = frozenset()) -> object:
        searches.append(k)
        return top_k(words, k, exclude=exclude)

    monkeypatch.setattr(resolver.index, "top_k", spy)
    return searches


def test_tiers_in_order_and_text_shape(counter: TokenCounter) -> None:
    resolver = resolver_with(
        counter,
        mem("fact", "The user is Dana.", layer="l1"),
        mem("pin", "Dana works in Lisbon.", tier="hot"),
        mem("bill", "Invoices go out on the 1st.", tier="warm", triggers=(r"\binvoice",)),
        mem("k8s", "Clusters run k3s.", tier="warm", triggers=(r"\bk8s\b",)),
        mem("hist", "The invoice export failed in May.", at=T0 + timedelta(days=3)),
        mem("other", "Lunch was pizza."),
    )
    result = resolver.resolve("Why is the invoice late?", 500, NOW)
    assert ids(result)[:3] == ["fact", "pin", "bill"]
    assert "hist" in ids(result)
    assert "k8s" not in ids(result) and "other" not in ids(result)
    assert result.tiers_used == ("hot", "warm", "cold")
    assert result.text.startswith("Memory:\n- The user is Dana.")
    # a day header per day, the year only where it changes (here: the first)
    assert "\n[1 May 2024]\n- Dana works in Lisbon." in result.text
    assert "\n[4 May]\n- The invoice export failed in May." in result.text
    assert result.tokens_used == counter.count(result.text) <= 500
    assert result.dropped == 0 and not result.hot_overflow


def test_once_items_once_per_session(counter: TokenCounter) -> None:
    resolver = resolver_with(
        counter, mem("greet", "Say hello to Dana first.", layer="l1", once=True)
    )
    first = resolver.resolve("hi", 200, NOW)
    assert ids(first) == ["greet"] and first.once_ids == ("greet",)
    again = resolver.resolve("hi", 200, NOW, seen_once=set(first.once_ids))
    assert ids(again) == [] and again.text == "" and again.dropped == 0
    other_session = resolver.resolve("hi", 200, NOW, seen_once=set())
    assert ids(other_session) == ["greet"]


def test_invalid_trigger_is_skipped_not_fatal(counter: TokenCounter) -> None:
    resolver = resolver_with(
        counter,
        mem("bad", "Never shown by trigger.", tier="warm", triggers=(r"(a)\1", "(unclosed")),
        mem("mixed", "Shown by the second trigger.", tier="warm", triggers=("[", r"(?i)PRICING")),
    )
    result = resolver.resolve("what is the pricing?", 200, NOW)
    assert ids(result) == ["mixed"]


def test_hostile_regex_does_not_hang(counter: TokenCounter) -> None:
    hostile = "(a+)+$"  # catastrophic backtracking in a backtracking engine
    resolver = resolver_with(counter, mem("evil", "x", tier="warm", triggers=(hostile, "(x+x+)+y")))
    prompt = "a" * 50_000 + "!"
    started = time.perf_counter()
    resolver.resolve(prompt, 200, NOW)
    assert time.perf_counter() - started < 2.0


def test_overflow_note_counts_left_out_matches(counter: TokenCounter) -> None:
    items = [mem(f"m{i}", f"Note {i} about the garden roses and tulips.") for i in range(40)]
    resolver = resolver_with(counter, *items)
    result = resolver.resolve("garden roses", 60, NOW)
    assert 0 < len(result.items) < 40
    assert result.dropped == 40 - len(result.items)
    assert result.text.endswith(note_line(result.dropped))
    assert result.tokens_used == counter.count(result.text) <= 60


def test_hot_overflow_trimmed_by_priority_and_flagged(counter: TokenCounter) -> None:
    long = "word " * 80
    resolver = resolver_with(
        counter,
        mem("l1", "Core identity fact.", layer="l1"),
        mem("big", long, tier="hot", importance=5),
        mem("small", "A small hot fact.", tier="hot", importance=2),
    )
    result = resolver.resolve("anything", 40, NOW)
    assert result.hot_overflow
    assert "big" not in ids(result)
    assert ids(result)[0] == "l1"
    assert result.dropped >= 1
    assert result.tokens_used == counter.count(result.text) <= 40
    assert "left out" in result.text


def test_trace_reasons(counter: TokenCounter) -> None:
    items = [mem(f"m{i}", f"Tulip bulbs note number {i} " + "filler " * i) for i in range(12)]
    resolver = resolver_with(counter, *items)
    result = resolver.resolve("tulip bulbs", 80, NOW, trace=True)
    reasons = {row["id"]: row["reason"] for row in result.trace}
    assert {reasons[i] for i in ids(result)} == {"taken"}
    assert any(r == "left: budget" for r in reasons.values())
    row = result.trace[0]
    assert {"id", "key", "layer", "phase", "bm25", "score", "tokens", "reason"} <= set(row)
    assert not resolver.resolve("tulip bulbs", 80, NOW).trace


def test_frecency_is_a_mild_prior_among_matches(counter: TokenCounter) -> None:
    strong = mem("strong", "Rust borrow checker lifetimes explained with examples.")
    popular = mem("popular", "Rust toolchain notes.", access_count=50, at=T0 + timedelta(days=1))
    unrelated = mem(
        "unrelated", "Sourdough starter feeding.", access_count=500, at=T0 + timedelta(days=2)
    )
    resolver = resolver_with(counter, strong, popular, unrelated)
    result = resolver.resolve("rust borrow checker lifetimes", 1000, NOW, trace=True)
    assert ids(result)[0] == "strong"
    assert "unrelated" not in ids(result)


def test_upsert_and_remove_keep_index_in_step(counter: TokenCounter) -> None:
    resolver = resolver_with(counter, mem("a", "The cat sat."))
    assert ids(resolver.resolve("cat", 100, NOW)) == ["a"]
    resolver.upsert(replace(resolver.get("a") or mem("a", ""), content="The dog sat."))
    assert ids(resolver.resolve("cat", 100, NOW)) == []
    assert ids(resolver.resolve("dog", 100, NOW)) == ["a"]
    assert resolver.remove("a") and not resolver.remove("a")
    assert ids(resolver.resolve("dog", 100, NOW)) == [] and len(resolver) == 0


def test_neighbour_of_a_hit_comes_along(counter: TokenCounter) -> None:
    question = mem("q", "Melanie: What did you paint last week?", at=T0)
    answer = mem("a", "Caroline: A sunrise over the lake, my favourite so far.", at=T0)
    far = mem("far", "Caroline: Completely unrelated chat.", at=T0 + timedelta(days=30))
    resolver = Resolver(counter)
    for item in (question, answer, far):
        resolver.upsert(item)
    result = resolver.resolve("What did Melanie paint?", 500, NOW)
    assert set(ids(result)[:2]) == {"q", "a"}
    assert "far" not in ids(result)


def test_the_turn_after_a_question_is_its_answer(counter: TokenCounter) -> None:
    # the same question between two replies: the one after it takes its bonus as an answer
    before = mem("before", "Caroline: The weather was lovely today.", at=T0)
    question = mem("q", "Melanie: What did you paint last week?", at=T0)
    after = mem("after", "Caroline: A sunrise over the lake, my favourite so far.", at=T0)
    resolver = Resolver(counter)
    for item in (before, question, after):
        resolver.upsert(item)
    result = resolver.resolve("What did Melanie paint?", 500, NOW, trace=True)
    scores = {row["id"]: row["score"] for row in result.trace}
    assert scores["after"] > scores["q"] > scores["before"] > 0
    plain = Resolver(counter, RankingSettings(answer_weight=RankingSettings().neighbour_weight))
    for item in (before, question, after):
        plain.upsert(item)
    even = {row["id"]: row["score"] for row in plain.resolve("paint", 500, NOW, trace=True).trace}
    assert even["after"] == even["before"]


def test_a_sessions_turns_read_in_the_order_they_were_said(counter: TokenCounter) -> None:
    # the answer outranks its question; the text still shows the question first
    question = mem("q", "Melanie: What did you paint last week?", at=T0)
    answer = mem("a", "Caroline: I painted a sunrise, a sunrise over the lake.", at=T0)
    resolver = resolver_with(counter, question, answer)
    result = resolver.resolve("sunrise", 500, NOW)
    assert ids(result) == ["a", "q"]
    lines = result.text.splitlines()
    assert lines.index("- " + question.content) < lines.index("- " + answer.content)


def test_zero_budget_is_empty(counter: TokenCounter) -> None:
    resolver = resolver_with(counter, mem("a", "Something", layer="l1"))
    result = resolver.resolve("x", 0, NOW)
    assert result.text == "" and result.tokens_used == 0 and result.items == []


WORDS = st.sampled_from(
    [
        "garden",
        "rose",
        "invoice",
        "price",
        "Caroline:",
        "café",
        "日本語",
        "😀",
        "\n",
        "—",
        "x" * 30,
        "42",
    ]
)
CANDIDATE = st.builds(
    lambda words, tier, layer, once, imp, day, trig: (
        " ".join(words),
        tier,
        layer,
        once,
        imp,
        day,
        trig,
    ),
    st.lists(WORDS, min_size=1, max_size=30),
    st.sampled_from(["hot", "warm", "cold", "cold"]),
    st.sampled_from(["l1", "l2", "l3", "l3"]),
    st.booleans(),
    st.integers(1, 5),
    st.integers(0, 40),
    st.sampled_from([(), ("garden",), ("(",), ("pri.e",)]),
)


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    specs=st.lists(CANDIDATE, max_size=40),
    budget=st.integers(0, 400),
    prompt=st.lists(WORDS, min_size=1, max_size=6).map(" ".join),
)
def test_budget_is_never_exceeded(
    counter: TokenCounter,
    specs: list[tuple[str, str, str, bool, int, int, tuple[str, ...]]],
    budget: int,
    prompt: str,
) -> None:
    resolver = Resolver(counter)
    for n, (content, tier, layer, once, imp, day, trig) in enumerate(specs):
        resolver.upsert(
            mem(
                f"c{n}",
                content,
                layer=layer,
                tier=tier,
                once=once,
                importance=imp,
                triggers=trig,
                at=T0 + timedelta(hours=day),
            )
        )
    result = resolver.resolve(prompt, budget, NOW, trace=True)
    assert result.tokens_used == counter.count(result.text) <= budget
    assert len({c.id for c in result.items}) == len(result.items)
    assert result.dropped >= 0
    if result.dropped and result.text:
        assert result.text.endswith(note_line(result.dropped))


def test_pruned_pool_selects_like_the_exact_path(counter: TokenCounter) -> None:
    common = [
        mem(f"c{i:03d}", f"Caroline: chat {i} about weekend plans", at=T0 + timedelta(hours=i))
        for i in range(400)
    ]
    rare = [
        mem(f"r{i}", f"Caroline: painted a sunrise over the lake {i}", at=T0 + timedelta(hours=i))
        for i in range(0, 400, 40)
    ]
    resolver = resolver_with(counter, *common, *rare)
    assert resolver.pool_size(200) < len(common)
    pruned = resolver.resolve("When did Caroline paint a sunrise?", 200, NOW)
    exact = resolver.resolve("When did Caroline paint a sunrise?", 200, NOW, pool=0)
    strong = {c.id for c in rare}
    assert strong <= set(ids(pruned)) and strong <= set(ids(exact))  # the hits, all of them
    # beyond them only neighbours of hits come along (bonuses from weaker matches are the
    # exact path's extra, see Resolver._cold)
    assert {i for i in ids(pruned) if i not in strong} <= {f"c{i:03d}" for i in range(0, 400, 40)}
    assert exact.dropped_exact and not pruned.dropped_exact
    assert 0 < pruned.dropped <= exact.dropped  # a lower bound, and the note says as much
    assert pruned.text.endswith(note_line(pruned.dropped))
    assert pruned.tokens_used == counter.count(pruned.text) <= 200


def test_pool_widens_when_the_budget_outlasts_it(counter: TokenCounter) -> None:
    # days apart: no neighbours, so the rows are the hits alone and a large budget needs
    # more of them than the first pool holds
    items = [
        mem(f"m{i:03d}", f"Caroline: painted a sunrise number {i}", at=T0 + timedelta(days=i))
        for i in range(300)
    ]
    resolver = resolver_with(counter, *items)
    assert resolver.pool_size(2000) < 100
    pruned = resolver.resolve("When did Caroline paint a sunrise?", 2000, NOW)
    exact = resolver.resolve("When did Caroline paint a sunrise?", 2000, NOW, pool=0)
    assert len(pruned.items) > 100  # widened until the budget, not the pool, ran out
    assert set(ids(pruned)) == set(ids(exact))
    assert pruned.tokens_used == counter.count(pruned.text) <= 2000


def test_answer_bonus_goes_to_the_turn_after_a_question() -> None:
    settings = RankingSettings(neighbour_weight=0.5, neighbour_decay=0.5, answer_weight=2.0)
    own = {"ask": 1.0, "reply": 0.0}
    near = {"ask": [("said", -1), ("reply", 1), ("later", 2)]}

    def asks(doc_id: str) -> bool:
        return doc_id == "ask"

    relevance = with_neighbours(own, near, settings, asks)
    assert relevance == {"ask": 1.0, "said": 0.5, "reply": 2.0, "later": 0.25}
    # a hit after a question that asks gets the answer bonus from it, listed either way
    assert with_neighbours(
        {"ask": 1.0, "reply": 1.0}, {"reply": [("ask", -1)]}, settings, asks
    ) == {
        "ask": 1.5,
        "reply": 3.0,
    }
    assert with_neighbours(own, near, settings)["reply"] == 0.5  # without `asks`: symmetric


def test_neighbour_bonus_counts_both_ways() -> None:
    settings = RankingSettings(neighbour_weight=0.5, neighbour_decay=0.5, neighbour_span=2)
    own = {"hit": 1.0, "next": 3.0}
    # only the hit's neighbours are listed: the stronger neighbour still lifts the hit
    relevance = with_neighbours(own, {"hit": [("next", 1), ("far", 2)]}, settings)
    assert relevance == {"hit": 1.0 + 0.5 * 3.0, "next": 3.0 + 0.5 * 1.0, "far": 0.25 * 1.0}
    assert with_neighbours(own, {}, settings) == own


def test_pool_stays_put_when_the_rest_cannot_reach_the_floor(
    counter: TokenCounter, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a few strong matches, many that share only a common word: a large budget outlasts the
    # strong ones, yet widening could only add what the relevance floor leaves out
    strong = [
        mem(f"s{i}", f"Caroline painted a sunrise over the lake {i}", at=T0 + timedelta(days=i))
        for i in range(5)
    ]
    weak = [
        mem(f"w{i:03d}", f"Caroline: ok {i}", at=T0 + timedelta(days=10 + i)) for i in range(400)
    ]
    resolver = resolver_with(counter, *strong, *weak)
    searches = pool_sizes_searched(resolver, monkeypatch)
    result = resolver.resolve("When did Caroline paint a sunrise over the lake?", 4000, NOW)
    assert {c.id for c in strong} <= set(ids(result))
    assert searches == [resolver.pool_size(4000)]


def test_pool_stays_put_when_its_lines_are_too_long_for_the_budget(
    counter: TokenCounter, monkeypatch: pytest.MonkeyPatch
) -> None:
    # every match is longer than the whole budget: a wider pool would only find more of them
    story = " ".join(f"word{i}" for i in range(120))
    items = [
        mem(f"m{i:03d}", f"Caroline painted a sunrise {i}: {story}", at=T0 + timedelta(days=i))
        for i in range(300)
    ]
    resolver = resolver_with(counter, *items)
    searches = pool_sizes_searched(resolver, monkeypatch)
    result = resolver.resolve("When did Caroline paint a sunrise?", 100, NOW)
    assert result.items == [] and result.dropped > 0
    assert searches == [resolver.pool_size(100)]


def test_neighbours_follow_time_then_arrival_through_changes(counter: TokenCounter) -> None:
    """Neighbours come from the L3 items in (created_at, arrival) order, kept through adds,
    re-dated items, moves between layers and removals (checked against that order built
    from scratch); an item arrives when it joins L3 at its moment."""
    resolver = Resolver(counter)
    arrival: dict[str, int] = {}
    tickets = itertools.count()
    held: dict[str, Candidate] = {}
    # many items share a moment, so the arrival order decides most neighbours
    steps = [(f"m{n % 9}", n % 4, "l2" if n % 5 == 0 else "l3", n % 7 == 6) for n in range(60)]
    for id_, minute, layer, drop in steps:
        if drop:
            resolver.remove(id_)
            held.pop(id_, None)
            arrival.pop(id_, None)
            continue
        item = mem(id_, f"note {id_}", layer=layer, at=T0 + timedelta(minutes=minute))
        was = held.get(id_)
        if was is None or (was.created_at, was.layer) != (item.created_at, item.layer):
            arrival[id_] = next(tickets)  # it joins its moment (anew) last
        held[id_] = item
        resolver.upsert(held[id_])
        order = sorted(
            (c for c in held.values() if c.layer == "l3"),
            key=lambda c: (c.created_at, arrival[c.id]),
        )
        for at, c in enumerate(order):
            want = [
                (order[at + step * d].id, step * d)
                for step in (-1, 1)
                for d in range(1, 4)
                if 0 <= at + step * d < len(order)
            ]
            assert resolver.neighbours(c.id) == want


def test_what_is_learnt_of_a_content_is_forgotten_when_it_changes(counter: TokenCounter) -> None:
    """The candidate keeps whether its content says when; a new content is asked again."""
    first = mem("a", "We met on Monday, 3 June 2024.")
    resolver = resolver_with(counter, first)
    kept = resolver.get("a")
    assert kept is not None and resolver._tells_when(kept) and kept.timed
    resolver.upsert(replace(kept, content="We met."))  # the copy would carry `timed` along
    changed = resolver.get("a")
    assert changed is not None and changed.timed is None and not resolver._tells_when(changed)
    resolver.upsert(replace(first, content="We met.", importance=4))  # same content: known
    again = resolver.get("a")
    assert again is not None and again.timed is False and again.importance == 4
