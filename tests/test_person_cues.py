"""Person cues: a question after several things about someone favours the memories
attributed to them; a question about one thing, or one naming nobody, is left alone."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from mnemod.domain.candidates import Candidate
from mnemod.domain.person_cues import asks_for_several, named, persons, speaker
from mnemod.domain.ranking import RankingSettings
from mnemod.domain.resolve import Resolver
from mnemod.tokens import TokenCounter, token_counter

NOW = datetime(2023, 10, 22, 9, 55, tzinfo=UTC)
AT = datetime(2023, 6, 1, tzinfo=UTC)
NO_PERSONS = RankingSettings(speaker_weight=0.0)


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return token_counter("cl100k_base")


def turn(id: str, content: str, minutes: int = 0) -> Candidate:
    at = AT.replace(minute=minutes)
    return Candidate(
        id=id, layer="l3", type="context", content=content, created_at=at, last_accessed_at=at
    )


def order(
    counter: TokenCounter, settings: RankingSettings, prompt: str, *turns: Candidate
) -> list[str]:
    resolver = Resolver(counter, settings)
    for item in turns:
        resolver.upsert(item)
    return [c.id for c in resolver.resolve(prompt, 500, NOW).items]


@pytest.mark.parametrize(
    "prompt",
    [
        "What hobbies does Ana have?",
        "Which cities has Jon visited?",
        "What kinds of music does Ana like?",
        "What are some changes Ana went through?",
        "What books did Ana read this year?",
        "What do Jon and Ana both enjoy?",
        "How many dogs does Ana have?",
    ],
)
def test_asks_for_several(prompt: str) -> None:
    assert asks_for_several(prompt)


@pytest.mark.parametrize(
    "prompt",
    [
        "What did Ana realize after the race?",
        "What does Ana do on weekends?",
        "What is Ana's favourite band?",
        "What status did the ticket have?",
        "Where did Ana move from?",
        "Why did Jon close the studio?",
    ],
)
def test_asks_for_one_thing(prompt: str) -> None:
    assert not asks_for_several(prompt)
    assert persons(prompt) == frozenset()


def test_names_and_speakers() -> None:
    assert named("What are Ana's pets' names, and Jon’s?") == {"ana", "jon"}
    assert persons("Which cities has Jon visited?") == {"jon"}
    assert speaker("Ana: We went camping.") == "ana"
    assert speaker("Mary Ann: Sure!") == "mary ann"
    assert speaker("  Jon: leading blanks") == "jon"
    assert speaker("jon: not capitalised") is None
    assert speaker("We went camping: it rained.") is None
    assert speaker("The deploy runs at 10:00 on Tuesdays.") is None


def test_a_question_after_several_things_favours_the_named_persons_memories(
    counter: TokenCounter,
) -> None:
    """Both memories are about hiking and name Ana; the one she said ranks first only with
    the cue (without it the shorter one does)."""
    hers = turn("hers", "Ana: Jon and I went hiking in the hills again this weekend, so fun.", 0)
    his = turn("his", "Jon: Ana and I went hiking in the hills.", 1)
    prompt = "What activities has Ana done, like hiking?"
    assert order(counter, NO_PERSONS, prompt, hers, his)[0] == "his"
    assert order(counter, RankingSettings(), prompt, hers, his)[0] == "hers"
    one_thing = "Where did Ana go hiking?"  # a question about one thing: no cue
    assert order(counter, RankingSettings(), one_thing, hers, his)[0] == "his"


def test_person_cues_only_reorder(counter: TokenCounter) -> None:
    """With room for everything, the cue selects what ranking without it selects."""
    turns = [
        turn("a", "Ana: We went hiking.", 0),
        turn("b", "Jon: Ana went hiking with me.", 1),
        turn("c", "Jon: The studio opened yesterday.", 30),
        turn("d", "Ana: I paint on Sundays.", 59),
    ]
    prompt = "What activities has Ana done, like hiking?"
    assert sorted(order(counter, RankingSettings(), prompt, *turns)) == sorted(
        order(counter, NO_PERSONS, prompt, *turns)
    )


NO_EVENTS = RankingSettings(event_weight=0.0)
TOLD = "I went hiking in the hills yesterday with the whole family, it was so much fun."
PLAIN = "I love hiking in the hills."


def test_the_named_persons_memories_that_tell_of_an_event_rank_higher(
    counter: TokenCounter,
) -> None:
    """Both are Ana's and about hiking; the one that says when ("yesterday": it tells of
    something she did) ranks first only with the event cue (without it the shorter one
    does)."""
    told, plain = turn("told", f"Ana: {TOLD}", 0), turn("plain", f"Ana: {PLAIN}", 30)
    prompt = "What activities has Ana done, like hiking?"
    assert order(counter, NO_EVENTS, prompt, told, plain)[0] == "plain"
    assert order(counter, RankingSettings(), prompt, told, plain)[0] == "told"


@pytest.mark.parametrize(
    ("prompt", "speakers"),
    [
        ("Where did Ana go hiking?", ("Ana", "Ana")),  # one thing: no person cue
        ("What activities has Ana done, and when did she go hiking?", ("Ana", "Ana")),
        ("What activities has Ana done in June, like hiking?", ("Ana", "Ana")),  # a period
        ("What activities has Ana done, like hiking?", ("Jon", "Jon")),  # not hers
    ],
)
def test_the_event_cue_is_inert_without_a_person_cue_on_a_when_question_or_for_others(
    counter: TokenCounter, prompt: str, speakers: tuple[str, str]
) -> None:
    """A question about one thing, one that asks when or names a period (the time cues weigh
    the memories by time), and memories of someone the prompt does not name: the order is
    the one without the cue, at any weight."""
    told = turn("told", f"{speakers[0]}: {TOLD}", 0)
    plain = turn("plain", f"{speakers[1]}: {PLAIN}", 30)
    assert order(counter, RankingSettings(), prompt, told, plain) == order(
        counter, NO_EVENTS, prompt, told, plain
    )
    doubled = RankingSettings(event_weight=10.0)  # inert at any weight
    assert order(counter, doubled, prompt, told, plain) == order(
        counter, NO_EVENTS, prompt, told, plain
    )
