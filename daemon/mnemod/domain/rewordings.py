"""One text's words read as the other's where they say the same thing in another form, for
dedup's score (domain.dedup.unworded_score): the other text's words (`theirs`) renamed to
this one's (`mine`), so that the weighted Jaccard counts them as shared. Five kinds, each a
technique of its own (bench/dedup.py measures each):
- `alignment`: an inflected form ("purchased"/"purchase", "said"/"say": domain.
  inflections), and with `synonyms` another word for the same thing ("said"/"told",
  "rose"/"climbed", "gov"/"governor": domain.synonyms);
- `acronyms`: an acronym and the name it stands for ("CDC"/"Centers for Disease
  Control": domain.acronyms);
- `compounds`: a word written as one and as two ("website"/"web site", "per cent"/
  "percent");
- `forenames`: a forename one text gives before a surname the other writes after a title
  ("Sean Harrigan"/"Mr. Harrigan"), the news' way of naming a person the second time.
Each renames only words the two texts do not share, to words of `mine`, so that what it
returns holds only words of the two texts: the weighted Jaccard stays within [0, 1] and the
candidates' bounds hold.
"""

from __future__ import annotations

import functools
import re

from mnemod.domain import acronyms, inflections
from mnemod.domain.keywords import term_of
from mnemod.domain.synonyms import head as synonyms_head

ALIGN_PREFIX = inflections.HEAD  # letters two unshared keywords agree in to be one word
PART = 2  # letters each part of a compound has at least


def aligned(mine: frozenset[str], theirs: frozenset[str], synonyms: bool = True) -> frozenset[str]:
    """`theirs` with each word it does not share with `mine` renamed to the one unshared
    word of `mine` that has its head (when exactly one has): its first `ALIGN_PREFIX`
    letters once inflections are folded ("purchased"/"purchase", "said"/"say", "posted"/
    "posting": domain.inflections.head), or with `synonyms` its group in domain.synonyms'
    table when it is in one ("said"/"told", "rose"/"climbed")."""
    unshared = theirs - mine
    if not unshared:
        return theirs
    head = synonyms_head if synonyms else inflections.head
    heads: dict[str, str | None] = {}
    for word in mine - theirs:
        key = head(word)
        heads[key] = None if key in heads else word
    found = {w: to for w in unshared if (to := heads.get(head(w))) is not None}
    if not found:
        return theirs
    return frozenset(found.get(w, w) for w in theirs)


def spelled_out(
    mine: frozenset[str], my_text: str, theirs: frozenset[str], their_text: str
) -> frozenset[str]:
    """`theirs` with an acronym one text writes and the name the other spells it with
    (domain.acronyms) as one name: their acronym replaced by the name's words in `mine`,
    or the name's words in `theirs` by my acronym."""
    mine_written, theirs_written = acronyms.written(my_text), acronyms.written(their_text)
    if not mine_written and not theirs_written:  # most texts write no acronym
        return theirs
    only_mine, only_theirs = mine - theirs, theirs - mine
    found: set[str] | None = None
    for written, name_text, name_words, theirs_written_it in (
        (only_theirs & theirs_written, my_text, only_mine, True),
        (only_mine & mine_written, their_text, only_theirs, False),
    ):
        for word in written:
            name = [w for w in acronyms.stands_for(word, name_text) if w in name_words]
            if not name:
                continue
            found = set(theirs) if found is None else found
            if theirs_written_it:  # I spell it out: my words for their acronym
                found.discard(word)
                found.update(name)
            else:  # they spell it out: my acronym for their words
                found.difference_update(name)
                found.add(word)
    return theirs if found is None else frozenset(found)


def joined_up(mine: frozenset[str], theirs: frozenset[str]) -> frozenset[str]:
    """`theirs` with a word one text writes as one and the other as two ("website"/"web",
    "site") as one: their compound replaced by my two parts, or their two parts by my
    compound. Parts of `PART` letters at least, each a word the other does not share."""
    only_mine, only_theirs = mine - theirs, theirs - mine
    if not only_mine or not only_theirs:
        return theirs
    found: set[str] | None = None
    for compounds, parts, theirs_joined in ((only_theirs, only_mine, True),
                                            (only_mine, only_theirs, False)):  # fmt: skip
        ends = tuple(parts)  # a compound begins as one of its parts and ends as another
        for word in compounds:
            if not word.startswith(ends) or (split := _split(word, parts)) is None:
                continue
            found = set(theirs) if found is None else found
            if theirs_joined:
                found.discard(word)
                found.update(split)
            else:
                found.difference_update(split)
                found.add(word)
    return theirs if found is None else frozenset(found)


def _split(word: str, parts: frozenset[str]) -> tuple[str, str] | None:
    """`word` as two of `parts` one after the other, if it is."""
    for cut in range(PART, len(word) - PART + 1):
        if word[:cut] in parts and word[cut:] in parts:
            return word[:cut], word[cut:]
    return None


# a title and the capitalised word after it (a surname as the second mention gives it);
# no \b before it (that made the scan of every text four times slower): `_titled` checks
# that no letter comes before
TITLES = frozenset({"mr", "mrs", "ms", "dr", "gov", "sen", "rep", "gen", "prof"})  # keywords
_TITLED = re.compile(r"(?:M(?:rs?|s)|Dr|Gov|Sen|Rep|Gen|Prof)\.?\s+([A-Z][a-z]+)")
# a capitalised word, an initial maybe, then another: a forename and its surname
_FULL_NAME = re.compile(r"\b([A-Z][a-z]+)(?:\s+[A-Z]\.)?\s+(?=([A-Z][a-z]+))")


def forenamed(
    mine: frozenset[str], my_text: str, theirs: frozenset[str], their_text: str
) -> frozenset[str]:
    """`theirs` with a forename one text gives before a surname both hold and the other
    writes after a title ("Sean Harrigan" / "Mr. Harrigan") read as shared: my forename
    added to `theirs`, theirs taken out of it (the other text has no word to rename it
    to). Without the title any capitalised word before a shared one would count ("White
    House", "Health Department"), which refused more true duplicates than false ones."""
    if TITLES.isdisjoint(mine) and TITLES.isdisjoint(theirs):  # most texts give no title
        return theirs
    mine_titled, theirs_titled = _titled(my_text), _titled(their_text)
    shared = mine & theirs
    found: set[str] | None = None
    sides = ((my_text, mine - theirs, theirs_titled, False),
             (their_text, theirs - mine, mine_titled, True))  # fmt: skip
    for named, words, titled, theirs_named in sides:
        for forename, surname in _full_names(named) if titled else ():
            if forename in words and surname in shared and surname in titled:
                found = set(theirs) if found is None else found
                if theirs_named:
                    found.discard(forename)
                else:
                    found.add(forename)
    return theirs if found is None else frozenset(found)


@functools.lru_cache(maxsize=4096)
def _titled(text: str) -> frozenset[str]:
    """The keywords of the surnames `text` writes after a title. Cached: a stored text is
    read for each new one it is a candidate of."""
    found = (m for m in _TITLED.finditer(text) if not text[m.start() - 1 : m.start()].isalpha())
    return frozenset(term_of(m.group(1).casefold()) for m in found) - {""}


@functools.lru_cache(maxsize=4096)
def _full_names(text: str) -> tuple[tuple[str, str], ...]:
    """Each forename and surname `text` writes one after the other, as keywords."""
    return tuple(
        (term_of(first.casefold()), term_of(last.casefold()))
        for first, last in _FULL_NAME.findall(text)
    )
