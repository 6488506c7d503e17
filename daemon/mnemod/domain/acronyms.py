"""Acronyms and the names they stand for: "CDC" in one text is "Centers for Disease
Control" in the other, "GE" is "General Electric", "EU" is "European Union". Dedup's score
counts the two as one name (domain.rewordings.spelled_out): their keywords share nothing, yet
the texts name one thing, as often as not their subject.

An acronym is a keyword written in the text in two to six capitals; the name it stands for,
a run of capitalised words (with nothing but spaces or hyphens between them; the little
words of a name, "of", "and", "for", "the", skipped) whose initials spell it. Both are read
from the texts as written, so a plain word ("us", "ge") is no acronym. English names only.
"""

from __future__ import annotations

import functools
import re

from mnemod.domain.keywords import term_of

LONGEST = 6  # capitals of an acronym
_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*")  # a word as domain.keywords reads one
_ACRONYM = re.compile(rf"(?<![^\W_])[A-Z]{{2,{LONGEST}}}(?![^\W_])")  # capitals alone
_LITTLE = frozenset({"of", "and", "for", "the", "on", "in"})


@functools.lru_cache(maxsize=1 << 13)
def written(text: str) -> frozenset[str]:
    """The words `text` writes as acronyms (two to six capitals, a word of their own), in
    lower case as keywords hold them. Cached: on add the new text meets each candidate, and
    a stored text meets many new ones; most texts write none."""
    return frozenset(word.lower() for word in _ACRONYM.findall(text))


@functools.lru_cache(maxsize=1024)
def stands_for(acronym: str, text: str) -> tuple[str, ...]:
    """The keywords of the first name in `text` that `acronym` (lower case) spells, or none.
    Cached: on add, a stored text meets many new ones."""
    names: list[list[str]] = [[]]  # runs of capitalised words, the little words among them
    end = 0
    for match in _WORD.finditer(text):
        word = match.group()
        capital = word[0].isupper() and not word.isupper()
        if text[end : match.start()].strip(" -") or not (capital or word in _LITTLE):
            names.append([])
        if capital or word in _LITTLE:
            names[-1].append(word)
        end = match.end()
    for name in names:
        for start, first in enumerate(name):
            if first in _LITTLE or first[0].lower() != acronym[0]:
                continue
            spelling = [w for w in name[start:] if w not in _LITTLE][: len(acronym)]
            if "".join(w[0] for w in spelling).lower() == acronym:
                return tuple(t for w in spelling if (t := term_of(w.casefold().replace("’", "'"))))
    return ()
