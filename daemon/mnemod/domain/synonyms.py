"""One key for the words English uses for one thing ("said"/"told"/"added", "rose"/
"climbed", "attorney"/"lawyer", "labour"/"labor"), so that dedup's score can align two
texts' unshared words that say the same in other words (domain.dedup.aligned), as it aligns
the forms of one word (domain.inflections).

A small table, not a thesaurus: each group holds words that stand for one another in
most of their uses, and a word with several common senses ("back", "issue", "fire",
"state", "house") is in none, so that a substitution the table aligns is a rewording, not
another fact. A word is in one group at most (a test checks it). Like the inflections, this
is for the score alone: the keywords stay as extracted.
"""

from __future__ import annotations

import functools

from mnemod.domain import inflections
from mnemod.domain.keywords import term_of

# each group: words (in any form: they are folded to their keyword and inflection key)
# that stand for one another
GROUPS = (
    # saying and reporting
    "say tell add note remark according|announce unveil|claim allege|admit acknowledge concede|"
    "deny dispute|warn caution|urge encourage|criticize criticise condemn|praise commend|"
    "suggest propose|reply respond answer|ask request|"
    # more and less
    "increase rise climb gain jump surge grow soar|"
    "decrease fall drop decline slide slip plunge tumble dip sink|"
    "cut reduce lower trim slash|raise boost lift hike|"
    # doing
    "buy purchase acquire|begin start launch commence|finish end conclude complete|"
    "halt stop cease|show reveal indicate demonstrate|find discover|try attempt|"
    "need require|obtain receive|allow permit|charge accuse|plan intend|"
    "expect anticipate forecast predict|quit resign|hit strike|choose pick select|"
    "kill slay|help aid assist|seize capture|arrest detain|dismiss sack|sue lawsuit|"
    "decide determine|investigate probe examine|confirm verify|force compel|"
    "continue remain|prevent block|protect defend safeguard|attack assault|damage harm|"
    "destroy demolish|cause trigger spark|improve enhance|change alter modify|"
    "replace substitute|remove eliminate|create establish|provide supply|pay compensate|"
    "meet encounter|talk speak|fight combat battle|agree consent|appear seem|"
    "believe think|hope wish|dislike hate|shut close|happen occur|live reside|keep retain|"
    "go travel|come arrive|leave depart|"
    # things and people
    "car vehicle automobile|legislation law|nation country|attorney lawyer atty|shares stock|"
    "profit earnings|worker employee|spokesman spokeswoman spokesperson|percent pct|"
    "threat danger risk|problem trouble difficulty|chance opportunity|error mistake|"
    "goal aim objective|result outcome|child kid|mother mom mum|father dad|"
    "doctor physician dr|medicine drug medication|illness disease sickness|job employment|"
    "salary wage|city town|street road|company firm co|soldier troop|crash accident collision|"
    "explosion blast|prison jail|bid offer|agreement pact deal|lawmaker legislator|"
    "aircraft airplane jet|vessel boat|phone telephone|shop store|expert specialist|"
    "scientist researcher|study research|outbreak epidemic|"
    # titles and names as abbreviated
    "governor gov|senator sen|representative rep|general gen|corporation corp|"
    "incorporated inc|department dept|detective det|inspector insp|sergeant sgt|"
    "lieutenant lt|colonel col|captain capt|professor prof|association assn|"
    "international intl|avenue ave|mount mt|superintendent supt|government govt|"
    "university univ|"
    # kinds and degrees
    "big large huge vast enormous|small little tiny|quick fast rapid swift|"
    "strong robust solid|weak sluggish|injure wound hurt|main primary principal|"
    "recent latest|previous prior earlier|hard difficult tough|easy simple|"
    "wrong incorrect|enough sufficient|important significant crucial vital|"
    "approximately roughly nearly almost|usually typically normally|"
    "often frequently|maybe perhaps possibly|mainly mostly largely chiefly|"
    # British and American spellings that differ within their first letters
    "labour labor|colour color|favour favor|honour honor|centre center|grey gray|tyre tire|"
    "cheque check|sceptical skeptical|paediatric pediatric|foetus fetus|mould mold|"
    "plough plow"
)


def _forms_key(word: str) -> str:
    """The inflection key of `word` as a keyword ("shares" is "share", "told" is "tell")."""
    return inflections.key(term_of(word) or word)


def table(groups: str = GROUPS) -> dict[str, list[str]]:
    """Each inflection key of the table's words and the groups (their first words) it is
    in: one, for a table as it should be."""
    found: dict[str, list[str]] = {}
    for group in groups.split("|"):
        words = group.split()
        for word in words:
            held = found.setdefault(_forms_key(word), [])
            if words[0] not in held:
                held.append(words[0])
    return found


_GROUP = {key: "=" + groups[0] for key, groups in table().items()}  # "=": no word's head


@functools.lru_cache(maxsize=1 << 14)
def head(word: str) -> str:
    """What dedup aligns a keyword by: its group's name when the table holds it, else its
    head as an inflected form (domain.inflections.head). Cached, as that one is."""
    group = _GROUP.get(inflections.key(word))
    return group if group is not None else inflections.head(word)


def grouped(word: str) -> bool:
    """Whether the table holds `word` (a keyword)."""
    return inflections.key(word) in _GROUP
