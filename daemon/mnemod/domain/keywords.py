"""Keyword extraction: Unicode-aware words, casefolded, stopwords out, a light plural stemmer.

Used for dedup (keyword-set Jaccard) and as the terms of the BM25 index, so both agree on
what a word is. "café" stays "café"; "naïve" is a word too. Chinese, Japanese and Korean
write no spaces between words, so a run of their characters becomes its overlapping
character pairs ("烏龍茶" → "烏龍", "龍茶"), as search engines index them: a whole sentence
would otherwise be one word that no question ever matches.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)
# Han (with extensions and compatibility forms), kana and Hangul: scripts written unspaced
_CJK = (
    "\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uac00-\ud7af\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f"
)
_CJK_CHAR = re.compile(f"[{_CJK}]")
_CJK_SPLIT = re.compile(f"([{_CJK}]+)")
# distinct words whose terms are remembered (under 2 MB when full; the least recent go first)
WORDS_CACHED = 1 << 14
TEXTS_CACHED = 16  # see _terms

STOPWORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "aren't",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "can't",
        "cannot",
        "could",
        "couldn't",
        "did",
        "didn't",
        "do",
        "does",
        "doesn't",
        "doing",
        "don't",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "hadn't",
        "has",
        "hasn't",
        "have",
        "haven't",
        "having",
        "he",
        "he'd",
        "he'll",
        "he's",
        "her",
        "here",
        "here's",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "how's",
        "i",
        "i'd",
        "i'll",
        "i'm",
        "i've",
        "if",
        "in",
        "into",
        "is",
        "isn't",
        "it",
        "it's",
        "its",
        "itself",
        "let's",
        "me",
        "more",
        "most",
        "mustn't",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "ought",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "shan't",
        "she",
        "she'd",
        "she'll",
        "she's",
        "should",
        "shouldn't",
        "so",
        "some",
        "such",
        "than",
        "that",
        "that's",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "there's",
        "these",
        "they",
        "they'd",
        "they'll",
        "they're",
        "they've",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "wasn't",
        "we",
        "we'd",
        "we'll",
        "we're",
        "we've",
        "were",
        "weren't",
        "what",
        "what's",
        "when",
        "when's",
        "where",
        "where's",
        "which",
        "while",
        "who",
        "who's",
        "whom",
        "why",
        "why's",
        "will",
        "with",
        "won't",
        "would",
        "wouldn't",
        "you",
        "you'd",
        "you'll",
        "you're",
        "you've",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "also",
        "just",
        "really",
        "would",
        "like",
        "get",
        "got",
        "yeah",
        "oh",
        "hey",
        "hi",
        "okay",
        "ok",
        "um",
        "uh",
        "s",
        "t",
    ]
) - {"like"}


def stem(word: str) -> str:
    """Fold the commonest English inflections so that 'likes' meets 'like'; leave the rest."""
    if len(word) <= 3 or not word.isascii():
        return word
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("sses"):
        return word[:-2]
    if word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def unspaced(text: str) -> bool:
    """Whether the text holds characters of a script written without spaces (CJK)."""
    return _CJK_CHAR.search(text) is not None


def terms(text: str) -> list[str]:
    """Every content term of `text` in order, duplicates kept (for term frequencies)."""
    return list(_terms(text))


@functools.lru_cache(maxsize=TEXTS_CACHED)
def _terms(text: str) -> tuple[str, ...]:
    """Cached for the few texts just read: an add reads its text for its keywords, then at
    once for resolve's index (domain.ranking.analyze), some 20 µs each time."""
    return tuple(_scan(text))


def _scan(text: str) -> list[str]:
    normalized = unicodedata.normalize("NFC", text).casefold().replace("’", "'")
    if _CJK_CHAR.search(normalized) is None:  # one scan of the text, not one per word
        return [term for term in map(term_of, _WORD.findall(normalized)) if term]
    found: list[str] = []
    for word in _WORD.findall(normalized):
        if _CJK_CHAR.search(word) is None:
            term = term_of(word)
            if term:
                found.append(term)
        else:
            found.extend(unspaced_terms(word))
    return found


def unspaced_terms(word: str) -> list[str]:
    """The terms of a word holding CJK characters: each run of them as its overlapping
    character pairs (a lone character as itself), the rest as ordinary words
    ("iphone手機殼" → "iphone", "手機", "機殼"). Not cached: such a "word" is often a
    whole sentence, seldom seen twice."""
    out: list[str] = []
    for part in _CJK_SPLIT.split(word):
        if not part:
            continue
        if _CJK_CHAR.match(part) is None:
            term = term_of(part)
            if term:
                out.append(term)
        elif len(part) == 1:
            out.append(part)
        else:
            out.extend(part[i : i + 2] for i in range(len(part) - 1))
    return out


@functools.lru_cache(maxsize=WORDS_CACHED)
def term_of(word: str) -> str:
    """The term a casefolded word stands for, or "" for none. Cached: most words of a memory
    were seen before, and reading 100,000 entries at start spent a quarter of its time here."""
    if word in STOPWORDS:
        return ""
    if word.endswith("'s"):
        word = word[:-2]
    word = stem(word.replace("'", ""))
    if word and word not in STOPWORDS and not (len(word) == 1 and word.isascii()):
        return word
    return ""


def extract_keywords(text: str, limit: int = 64) -> list[str]:
    """Distinct terms in first-seen order, at most `limit`."""
    return list(dict.fromkeys(_terms(text)))[:limit]


def normalize_keywords(given: Iterable[str], limit: int = 64) -> list[str]:
    """Keywords an agent supplied, folded the same way as extracted ones."""
    folded: list[str] = []
    for item in given:
        folded.extend(terms(item) or [item.casefold().strip()])
    return [k for k in dict.fromkeys(folded) if k][:limit]


def jaccard(a: Iterable[str], b: Iterable[str]) -> float:
    left, right = set(a), set(b)
    if not left and not right:
        return 0.0
    return len(left & right) / len(left | right)
