"""Kin of a prompt's word that no memory holds: the related forms the memories may hold.

A query word in no memory adds nothing to any score, yet it often names what the memories
say in another form: "mentorship" where they say "mentored" (folded "mentor"), "musician"
where they say "music", "promote" (folded "promot") where they say "promotion". Its kin are
the indexed terms made of it and a derivational suffix, or else the longest indexed term it
is made of, the rest of it being such a suffix; resolve scores them at a fraction of a
word's weight (`RankingSettings.kin_weight`). A word that some memory holds is left alone:
related forms of a word that matches meet as many other memories as they meet answers.
Pure; English suffixes only, on the terms `ranking.analyze` gives (folded).
"""

from __future__ import annotations

from collections.abc import Callable

# suffixes that make a word of a word ("promot" → "promotion", "mentor" → "mentorship"),
# as they end folded terms ("-ize" folds to "iz", "-ized" and "-izing" too)
SUFFIXES = frozenset(
    [
        *("ion", "ions", "ation", "er", "or", "ist", "ian", "al", "ial", "ic", "ical"),
        *("ity", "ive", "ly", "ment", "ness", "ship", "ful", "less", "ary", "ery"),
        *("ism", "ure", "iz"),
    ]
)
_SHORTEST = 5  # letters of a word, and of a kin it is made of, at least
_LONGEST_SUFFIX = max(map(len, SUFFIXES))


def kin(word: str, known: Callable[[str], bool]) -> list[str]:
    """The kin of `word` for which `known` (whether some memory holds a term) is true: each
    `word` + suffix, or if none, the longest known term that `word` is + a suffix. Empty for
    a known word, a short one, or one with a digit."""
    if len(word) < _SHORTEST or not word.isalpha() or known(word):
        return []
    longer = sorted(t for t in (word + s for s in SUFFIXES) if known(t))
    if longer:
        return longer
    for end in range(len(word) - 1, max(_SHORTEST, len(word) - _LONGEST_SUFFIX) - 1, -1):
        if word[end:] in SUFFIXES and known(word[:end]):
            return [word[:end]]
    return []
