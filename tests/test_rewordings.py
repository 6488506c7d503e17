"""The same thing written otherwise, read as one for dedup's score: synonyms, acronyms,
compounds and forenames (domain.rewordings, domain.synonyms, domain.acronyms)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from mnemod.config import DedupConfig
from mnemod.domain import acronyms, synonyms
from mnemod.domain.dedup import TECHNIQUES, PairWeights, Side, compare, judged_pairs
from mnemod.domain.keywords import extract_keywords
from mnemod.domain.model import Entry
from mnemod.domain.rewordings import aligned, forenamed, joined_up, spelled_out
from mnemod.tokens import token_counter

COUNT = token_counter().count


def side(text: str) -> Side:
    return Side.read(frozenset(extract_keywords(text)), text, COUNT(text))


def words(*listed: str) -> frozenset[str]:
    return frozenset(listed)


def test_each_word_of_the_synonym_table_is_in_one_group() -> None:
    """A word in two groups would align words of both with each other ("decline" is both
    a fall and a refusal): the table keeps such words out."""
    table = synonyms.table()
    assert {key: groups for key, groups in table.items() if len(groups) > 1} == {}
    doubled = synonyms.table("fall drop decline|refuse decline")
    assert doubled["declin"] == ["fall", "refuse"]


def test_synonyms_are_aligned_as_one_word() -> None:
    """ "told" in one text and "said" in the other are one word for the score, in any form
    ("added" / "noted"); without the table they stay apart, as two words that are not
    synonyms do."""
    told, said = words("prosecutor", "told", "home"), words("prosecutor", "said", "home")
    assert aligned(told, said) == told
    assert aligned(told, said, synonyms=False) == said
    assert aligned(words("added", "price"), words("noted", "price")) == words("added", "price")
    assert aligned(words("rose", "price"), words("climbed", "price")) == words("rose", "price")
    assert aligned(words("rose", "price"), words("fell", "price")) == words("fell", "price")
    assert synonyms.head("attorney") == synonyms.head("lawyer") != synonyms.head("judge")


def test_an_acronym_and_the_name_it_stands_for_are_one_name() -> None:
    """ "CDC" is "Centers for Disease Control": the acronym as written in capitals, the name
    as capitalised words whose initials spell it, the little words skipped; a plain "us" is
    no acronym, and words apart across punctuation are no name."""
    text = "The Centers for Disease Control said, on Monday, that General Electric agreed."
    assert acronyms.stands_for("cdc", text) == ("center", "disease", "control")
    assert acronyms.stands_for("ge", text) == ("general", "electric")
    assert acronyms.stands_for("mge", text) == ()  # "Monday, that General": not one name
    assert acronyms.written("The CDC told us about GE.") == {"cdc", "ge"}
    assert acronyms.written("The CDCs were told.") == set()
    spelled = side("The Centers for Disease Control warned of the flu season on Monday.")
    short = side("The CDC warned of the flu season on Monday.")
    as_one = spelled_out(short.words, short.text, spelled.words, spelled.text)
    assert as_one == short.words
    back = spelled_out(spelled.words, spelled.text, short.words, short.text)
    assert back == spelled.words
    plain = side("The cdc warned of the flu season on Monday.")  # not written as an acronym
    assert spelled_out(spelled.words, spelled.text, plain.words, plain.text) == plain.words


def test_a_compound_and_its_parts_are_one_word() -> None:
    """ "website" in one text is "web site" in the other, either way round; a word that is
    not two of the other's unshared words stays as it is."""
    one, two = words("company", "website"), words("company", "web", "site")
    assert joined_up(one, two) == one
    assert joined_up(two, one) == two
    assert joined_up(words("company", "webcast"), two) == two
    assert joined_up(words("company", "site", "web"), words("company", "website", "web")) == {
        "company",
        "website",
        "web",
    }  # "web" is shared: only "site" is left unshared, no compound of two


def test_a_forename_before_a_titled_surname_is_read_as_shared() -> None:
    """ "Sean Harrigan" in one text is "Mr. Harrigan" in the other, either way round; a
    capitalised word before a shared one is no forename when the other gives no title
    ("White House" / "House"), nor when the title stands before another name."""
    full = side("Sean Harrigan of the fund said the pension plan would sue the board.")
    titled = side("Mr. Harrigan said the pension plan would sue the board.")
    assert forenamed(titled.words, titled.text, full.words, full.text) == full.words - {"sean"}
    assert forenamed(full.words, full.text, titled.words, titled.text) == titled.words | {"sean"}
    untitled = side("Harrigan said the pension plan would sue the board.")
    assert forenamed(untitled.words, untitled.text, full.words, full.text) == full.words
    other = side("Dr Jones said Harrigan and the pension plan would sue the board.")
    assert forenamed(other.words, other.text, full.words, full.text) == full.words
    house = side("The bill won White House approval in March.")
    plain = side("The bill won House approval in March.")
    assert forenamed(plain.words, plain.text, house.words, house.text) == house.words


def test_a_rewording_lifts_the_score_and_the_report_says_by_how_much() -> None:
    """Each rewording only adds to the weighted Jaccard; the verdict says what each added
    when asked to explain (dedupe --report), and dedup on add and GC do not read it."""
    config = DedupConfig()
    pairs = [
        ("The prosecutor told reporters the suspect had fled the country by boat.",
         "The prosecutor said the suspect had fled the country by boat.", "synonyms"),
        ("The CDC warned hospitals about the new flu strain on Monday morning.",
         "The Centers for Disease Control warned hospitals about the new flu strain on Monday.",
         "acronyms"),
        ("The company moved its web site to a new host on Friday evening.",
         "The company moved its website to a new host on Friday evening.", "compounds"),
        ("Sean Harrigan of the fund said the pension plan would sue the board over pay.",
         "Mr. Harrigan said the pension plan of the fund would sue the board over pay.",
         "forenames"),
    ]  # fmt: skip
    for first, second, technique in pairs:
        a, b = side(first), side(second)
        weights = PairWeights(lambda _word: 0, 10)
        explained = compare(a, b, config, weights, explain=True)
        without = compare(a, b, config, weights, techniques=TECHNIQUES - {technique})
        assert explained.score > without.score, technique
        assert getattr(explained, technique) == pytest.approx(explained.score - without.score)
        assert getattr(compare(a, b, config, weights), technique) == 0.0  # not explained


def test_the_report_reads_what_a_rewording_added() -> None:
    config = DedupConfig()
    texts = (
        "The prosecutor told reporters the suspect had fled the country by boat.",
        "The prosecutor said the suspect had fled the country by boat.",
    )
    entries = [entry(f"E{i}", text) for i, text in enumerate(texts)]
    [(_pair, verdict)] = judged_pairs(entries, config)
    assert verdict.synonyms > 0 and verdict.as_dict()["synonyms"] == round(verdict.synonyms, 3)


def entry(entry_id: str, text: str) -> Entry:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    return Entry(entry_id, "context", text, at, at, at, None,
                 keywords=tuple(extract_keywords(text)), tokens=COUNT(text))  # fmt: skip
