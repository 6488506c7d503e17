"""What a text says that a keyword set hides: its numbers, its days and months, whether it
negates, its names, and how it is worded (its shingles).

Dedup reads them as guards (two texts that disagree here are not one memory) and a merge
reads them as contradictions ("Tuesdays" then "Thursdays": the older is superseded, not
silently replaced). Stopwords drop "not" and "never" from the keywords, so negation can only
be seen in the text itself. English cues only: other languages fall back to the keywords.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from itertools import pairwise
from operator import itemgetter
from typing import NamedTuple

from mnemod.domain.keywords import term_of, terms, unspaced
from mnemod.domain.time_cues import MONTHS, WEEKDAYS

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)
PREFIX = 4  # letters of a word that stand for it in `shingles`
_HEAD = itemgetter(slice(None, PREFIX))
_NUMBER = re.compile(r"\d+(?:[.,:/]\d+)*")

NEGATIONS = frozenset(
    [
        "not",
        "no",
        "never",
        "none",
        "nobody",
        "nothing",
        "nowhere",
        "neither",
        "nor",
        "without",
        "cannot",
        "dislike",
        "dislikes",
        "disliked",
        "hate",
        "hates",
        "hated",
    ]
)
DAYS = frozenset(
    [
        *WEEKDAYS,
        *(f"{day}s" for day in WEEKDAYS),
        *MONTHS,
        *("jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec"),
        *("today", "tomorrow", "yesterday", "weekday", "weekdays", "weekend", "weekends"),
    ]
)
_DAY_STEM = {name: name[:-1] for name in DAYS if name.endswith("s") and name[:-1] in DAYS}


def _negation_pattern(words: frozenset[str]) -> str:
    """Any of `words` as a whole word (not followed by an apostrophe: "nobody's" is no
    negation), or a "n't". Matched from its first letter, then a look behind for the word's
    start: the search skips on to the next of those letters instead of trying every
    position as a leading `\\b` makes it (a third faster on a sentence)."""
    heads = sorted({word[0] for word in words})
    rests = {h: sorted((w[1:] for w in words if w[0] == h), key=len, reverse=True) for h in heads}
    branches = "|".join(f"(?<={h})(?:{'|'.join(rests[h])})" for h in heads)
    return rf"[{''.join(heads)}](?<!\w.)(?:{branches})\b(?!['’])|n['’]t\b"


_NEGATION_PATTERN = _negation_pattern(NEGATIONS)
_NEGATION = re.compile(_NEGATION_PATTERN, re.IGNORECASE)
_NEGATION_LOWER = re.compile(_NEGATION_PATTERN)  # for ASCII text lowercased: some 3× faster


def words(text: str) -> list[str]:
    """The text's words, casefolded, with every word kept (stopwords too)."""
    return _WORD.findall(unicodedata.normalize("NFC", text).casefold().replace("’", "'"))


def word_count(text: str) -> int:
    return len(_WORD.findall(text))


@functools.lru_cache(maxsize=4096)
def numbers(text: str) -> frozenset[str]:
    """Numbers as written, thousands separators dropped ("10,000" is "10000"). Cached as
    `negated` is."""
    return frozenset(n.replace(",", "") for n in _NUMBER.findall(text))


def days(text: str) -> frozenset[str]:
    """Weekday and month names (and today/tomorrow…), plural weekdays folded ("Tuesdays" is
    "tuesday"). "may" counts only capitalised: the verb is far commoner than the month."""
    found = DAYS.intersection(_WORD.findall(text.casefold()))
    if "may" in found and "May" not in _WORD.findall(text):
        found -= {"may"}
    return frozenset(_DAY_STEM.get(name, name) for name in found)


@functools.lru_cache(maxsize=4096)
def negated(text: str) -> bool:
    """Whether the text says no: a negation word, a verb of refusal, or a "n't". Cached: on
    add, the new text meets each candidate, and a stored text meets many new ones."""
    if text.isascii():
        return _NEGATION_LOWER.search(text.lower()) is not None
    return _NEGATION.search(text) is not None


def names(text: str) -> frozenset[str]:
    """Capitalised words not opening a sentence, casefolded: the names a text mentions."""
    found: set[str] = set()
    opening = True
    for match in _WORD.finditer(text):
        word = match.group()
        if word[0].isupper() and not opening:
            found.add(word.casefold())
        end = match.end()
        rest = text[end : end + 2].lstrip()
        opening = rest[:1] in {".", "!", "?"}
    return frozenset(found)


def replaced(older: frozenset[str], newer: frozenset[str]) -> bool:
    """A value was replaced: each side holds one the other lacks ("10:00" then "11:00").
    One side only adding a value is more detail, not a contradiction."""
    return bool(older - newer) and bool(newer - older)


class Shingles(NamedTuple):
    """How a text is worded: the first `PREFIX` letters of each of its words (stopwords
    too, casefolded: "planned" meets "plans", and the little words of a phrasing count),
    and the pairs of its consecutive keywords (what it copies word for word, in order);
    and each word's term in order ("" for a stopword; none for unspaced text), for
    `unshared_run`."""

    prefixes: frozenset[str]
    pairs: frozenset[tuple[str, str]]
    terms: tuple[str, ...] = ()


@functools.lru_cache(maxsize=512)
def shingles(text: str) -> Shingles:
    """Cached as `negated` is (on add, the new text meets each candidate), but fewer: a
    text's shingles take some 3 kB."""
    found = words(text)
    if not text.isascii() and unspaced(text):  # a run of CJK is one "word": its pairs stand for it
        kept = terms(text)
        return Shingles(frozenset(kept), frozenset(pairwise(kept)))
    each = tuple(map(term_of, found))
    kept = list(filter(None, each))
    return Shingles(frozenset(map(_HEAD, found)), frozenset(pairwise(kept)), each)


def unshared_run(text: str, other: str, keywords: frozenset[str]) -> int:
    """The longest run of the text's words (stopwords too) in which no keyword is one of
    the `other` text's `keywords`, nor begins as one of its words does (their first
    `PREFIX` letters), and some word is a keyword: a clause the other text does not have.
    0 for unspaced text (CJK), whose "words" are whole runs of characters."""
    heads = shingles(other).prefixes
    best = run = 0
    content = False
    for term in shingles(text).terms:
        if term and (term in keywords or _HEAD(term) in heads):
            run, content = 0, False
            continue
        run += 1
        content = content or bool(term)
        if content and run > best:
            best = run
    return best


def overlap(a: frozenset[object], b: frozenset[object]) -> float:
    """Jaccard of two sets; 0 for two empty ones."""
    shared = len(a & b)
    union = len(a) + len(b) - shared
    return shared / union if union else 0.0
