"""One text's words read as the other's where they say the same thing in another form, for
dedup's score (domain.dedup.unworded_score): the other text's words (`theirs`) renamed to
this one's (`mine`), so that the weighted Jaccard counts them as shared. Four kinds, each a
technique of its own (bench/dedup.py measures each):
- `alignment`: an inflected form ("purchased"/"purchase", "said"/"say": domain.
  inflections), and with `synonyms` another word for the same thing ("said"/"told",
  "rose"/"climbed", "gov"/"governor": domain.synonyms);
- `acronyms`: an acronym and the name it stands for ("CDC"/"Centers for Disease
  Control": domain.acronyms);
- `compounds`: a word written as one and as two ("website"/"web site", "per cent"/
  "percent").
Each renames only words the two texts do not share, to words of `mine`, so that what it
returns holds only words of the two texts: the weighted Jaccard stays within [0, 1] and the
candidates' bounds hold.
"""

from __future__ import annotations

from mnemod.domain import acronyms, inflections
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
