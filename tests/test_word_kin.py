"""Word kin: a prompt's word that no memory holds backs off to the related forms they hold;
a word some memory holds is left alone. And the fold gives "-ied" and "-y" one term."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from mnemod.domain.keywords import stem
from mnemod.domain.ranking import RankingSettings, fold
from mnemod.domain.resolve import Resolver
from mnemod.domain.word_kin import kin
from mnemod.tokens import TokenCounter, token_counter
from test_time_cues import turn

NOW = datetime(2023, 7, 23, 18, 0, tzinfo=UTC)
T0 = datetime(2023, 6, 1, 9, 0, tzinfo=UTC)


def on(day: int) -> datetime:
    return T0 + timedelta(days=day)


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return token_counter("cl100k_base")


def test_kin_adds_a_suffix_or_takes_the_word_it_is_made_of() -> None:
    held = {"promotion", "promoter", "mentor", "music", "musical", "grand"}
    assert kin("promot", held.__contains__) == ["promoter", "promotion"]
    assert kin("mentorship", held.__contains__) == ["mentor"]
    assert kin("musician", held.__contains__) == ["music"]  # the longest held: "musical" is no part
    assert kin("grandpa", held.__contains__) == []  # "pa" is no suffix
    assert kin("music", held.__contains__) == []  # held: left alone
    assert kin("jon", held.__contains__) == kin("2023", held.__contains__) == []


def test_the_fold_gives_ied_and_y_one_term() -> None:
    for words in (("apply", "applied", "applies", "applying"), ("hoodie", "hoodies")):
        assert len({fold(stem(word)) for word in words}) == 1, words
    assert fold("play") == fold(stem("played")) == "play"  # a y after a vowel stays


def test_a_word_in_no_memory_finds_the_memories_of_its_kin(counter: TokenCounter) -> None:
    mentored = turn("m", "Jon: I got mentored by this amazing business dude yesterday!", on(14))
    others = [
        turn(f"o{i}", f"Jon: Busy day {i} at the dance studio, venture going.", on(i))
        for i in range(6)
    ]
    resolver = Resolver(counter)
    for item in (mentored, *others):
        resolver.upsert(item)
    prompt = "When did Jon receive mentorship for his venture?"
    rows = {r["id"]: r for r in resolver.resolve(prompt, 2000, NOW, trace=True).trace}
    assert rows["m"]["score"] > max(rows[o.id]["score"] for o in others)
    alone = Resolver(counter, RankingSettings(kin_weight=0.0))
    for item in (mentored, *others):
        alone.upsert(item)
    plain = {r["id"]: r for r in alone.resolve(prompt, 2000, NOW, trace=True).trace}
    assert plain["m"]["score"] < max(plain[o.id]["score"] for o in others)


def test_a_held_word_takes_no_kin(counter: TokenCounter) -> None:
    resolver = Resolver(counter)
    resolver.upsert(turn("a", "Gina: My mentor said to keep going.", on(1)))
    resolver.upsert(turn("b", "Gina: The mentorship programme starts in May.", on(2)))
    rows = {
        r["id"]: r for r in resolver.resolve("Who is Gina's mentor?", 500, NOW, trace=True).trace
    }
    assert rows["b"]["bm25"] == round(resolver.index.term_scores("gina")["b"], 4)  # its name only
