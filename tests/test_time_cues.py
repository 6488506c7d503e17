"""Time cues: a "when" question prefers memories that say when, a named period prefers the
memories from it; both only reorder what already matches."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from mnemod.domain.candidates import Candidate
from mnemod.domain.ranking import RankingSettings
from mnemod.domain.resolve import Resolver
from mnemod.domain.time_cues import asks_when, date_spans, tells_when
from mnemod.tokens import TokenCounter, token_counter

NOW = datetime(2023, 10, 22, 9, 55, tzinfo=UTC)
UNTIMED = RankingSettings(when_weight=0.0, date_weight=0.0)


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return token_counter("cl100k_base")


def turn(id: str, content: str, at: datetime) -> Candidate:
    return Candidate(
        id=id,
        layer="l3",
        type="context",
        content=content,
        created_at=at,
        last_accessed_at=at,
        key=id,
    )


def day(month: int, day: int) -> datetime:
    return datetime(2023, month, day, tzinfo=UTC)


def order(
    counter: TokenCounter, settings: RankingSettings, prompt: str, *turns: Candidate
) -> list[str]:
    """Ids of what resolve selects, in rank order."""
    resolver = Resolver(counter, settings)
    for item in turns:
        resolver.upsert(item)
    return [c.id for c in resolver.resolve(prompt, 500, NOW).items]


@pytest.mark.parametrize(
    "prompt",
    [
        "When did Melanie go camping?",
        "what date was the parade",
        "Which year did Jon open the studio?",
        "How long ago did she move?",
    ],
)
def test_asks_when(prompt: str) -> None:
    assert asks_when(prompt)


@pytest.mark.parametrize(
    "prompt",
    [
        "What did Melanie paint?",
        "Where has Melanie camped?",
        "Whenever works",
        "What did Gina do when she lost her job?",
        "when I run the tests, the build fails",
    ],
)
def test_does_not_ask_when(prompt: str) -> None:
    assert not asks_when(prompt)


def test_tells_when() -> None:
    assert tells_when("Melanie: We went camping last weekend!")
    assert tells_when("I moved here in 2019.")
    assert tells_when("See you on Monday")
    assert not tells_when("Camping is so relaxing, I love it.")
    assert not tells_when("Room 2400 is on the left")  # a number, not a year


def test_date_spans_name_a_day_a_month_or_a_year() -> None:
    day = datetime(2023, 10, 13, tzinfo=UTC)
    assert date_spans("on October 13, 2023?", NOW) == [(day, day + timedelta(days=1))]
    assert date_spans("on 13 October 2023", NOW) == [(day, day + timedelta(days=1))]
    assert date_spans("on 2023-10-13", NOW) == [(day, day + timedelta(days=1))]
    july = (datetime(2023, 7, 1, tzinfo=UTC), datetime(2023, 8, 1, tzinfo=UTC))
    assert date_spans("in July 2023", NOW) == [july]
    december = (datetime(2022, 12, 1, tzinfo=UTC), datetime(2023, 1, 1, tzinfo=UTC))
    assert date_spans("in December", NOW) == [december]  # the last December up to now
    year = (datetime(2023, 1, 1, tzinfo=UTC), datetime(2024, 1, 1, tzinfo=UTC))
    assert date_spans("trips in 2023", NOW) == [year]


def test_date_spans_leave_out_what_is_no_date() -> None:
    assert date_spans("May I ask what Jon likes?", NOW) == []  # "May" alone is a verb
    assert date_spans("on February 30, 2023", NOW) == []
    assert date_spans("on 2023-02-30", NOW) == []
    assert date_spans("What did Jon say?", NOW) == []


def test_when_question_prefers_the_memory_that_says_when(counter: TokenCounter) -> None:
    says_when = turn("when", "Melanie: We went camping last weekend.", day(6, 20))
    topical = turn(
        "topic",
        "Melanie: Camping with the kids, camping in the rain: camping is my thing.",
        day(8, 2),
    )
    prompt = "When did Melanie go camping?"
    assert order(counter, UNTIMED, prompt, says_when, topical) == ["topic", "when"]
    assert order(counter, RankingSettings(), prompt, says_when, topical) == ["when", "topic"]
    # not a "when" question: the plain ranking
    assert order(counter, RankingSettings(), "Melanie camping", says_when, topical)[0] == "topic"


def test_named_period_prefers_its_memories(counter: TokenCounter) -> None:
    june = turn("june", "Melanie: I painted a lake.", day(6, 10))
    # told a few days after the month ends: still within the slack
    told_after = turn("after", "Melanie: I painted a sunset.", day(7, 3))
    later = turn(
        "later",
        "Melanie: I painted and painted, a painting a day.",
        day(9, 1),
    )
    prompt = "What did Melanie paint in June?"
    assert order(counter, UNTIMED, prompt, june, told_after, later)[0] == "later"
    assert order(counter, RankingSettings(), prompt, june, told_after, later)[-1] == "later"


def test_time_cues_never_bring_in_a_memory_that_does_not_match(counter: TokenCounter) -> None:
    match = turn("match", "Melanie: We went camping.", day(9, 1))
    unrelated = turn("other", "Jon: The studio opened yesterday.", day(6, 10))
    prompt = "When did Melanie go camping in June?"
    assert order(counter, RankingSettings(), prompt, match, unrelated) == ["match"]


def test_cue_is_recomputed_when_the_content_changes(counter: TokenCounter) -> None:
    resolver = Resolver(counter)
    resolver.upsert(turn("a", "Melanie: We went camping last weekend.", day(6, 20)))
    resolver.upsert(turn("b", "Melanie: Camping, camping in the rain, camping all day.", day(8, 1)))
    prompt = "When did Melanie go camping?"
    assert resolver.resolve(prompt, 500, NOW).items[0].id == "a"
    resolver.upsert(turn("a", "Melanie: We went camping.", day(6, 20)))  # no longer says when
    assert resolver.resolve(prompt, 500, NOW).items[0].id == "b"
