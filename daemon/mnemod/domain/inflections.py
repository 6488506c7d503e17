"""One key for the inflected forms of an English word ("said"/"say", "posted"/"posting",
"bought"/"buy", "sept"/"september"), so that dedup's score can align two texts' unshared
words that are one word in another form (domain.dedup.aligned). Irregular forms come
from a small table, regular -ed and -ing forms by rule; anything else is its own key.

The keywords themselves stay as extracted (domain.keywords): this is for the score alone,
so stored entries and the search index keep agreeing on what a word is.
"""

from __future__ import annotations

import functools

# each group: the base form, then its other forms (verbs' past forms, irregular plurals,
# months' abbreviations)
IRREGULAR = (
    "say said saying|tell told|make made|take took taken|give gave given|go went gone|"
    "come came|see saw seen|know knew known|find found|think thought|buy bought|"
    "bring brought|sell sold|hold held|lead led|lose lost|pay paid|send sent|spend spent|"
    "build built|begin began begun|run ran|rise rose risen|fall fell fallen|grow grew grown|"
    "show shown|write wrote written|speak spoke spoken|break broke broken|choose chose chosen|"
    "drive drove driven|eat ate eaten|fight fought|teach taught|catch caught|seek sought|"
    "win won|meet met|keep kept|feel felt|stand stood|understand understood|strike struck|"
    "steal stole stolen|hide hid hidden|throw threw thrown|fly flew flown|draw drew drawn|"
    "drink drank drunk|wear wore worn|shake shook shaken|forget forgot forgotten|"
    "freeze froze frozen|arise arose arisen|ride rode ridden|sink sank sunk|sleep slept|"
    "sweep swept|deal dealt|mean meant|lend lent|shoot shot|feed fed|flee fled|hang hung|"
    "stick stuck|swing swung|spin spun|forbid forbade forbidden|undergo underwent undergone|"
    "withdraw withdrew withdrawn|overcome overcame|become became|foresee foresaw foreseen|"
    "use used using|die died dying|lie lying|tie tied tying|child children|woman women|"
    "man men|person people|foot feet|tooth teeth|january jan|february feb|march mar|"
    "april apr|june jun|july jul|august aug|september sep sept|october oct|november nov|"
    "december dec"
)
_BASE = {form: group.split()[0] for group in IRREGULAR.split("|") for form in group.split()}
HEAD = 5  # letters of a key that stand for it (domain.dedup.aligned)
_UNDOUBLED = frozenset("bdfgkmnprtvz")  # "planned" is "plan"; "called", "missed" keep theirs


def key(word: str) -> str:
    """The key of a keyword (casefolded, plurals already folded by domain.keywords.stem):
    the same for the forms of one word, and for few others."""
    word = _BASE.get(word, word)
    if word.endswith("ing") and len(word) >= 6:
        word = word[:-3]
    elif word.endswith("ied") and len(word) >= 5:
        word = word[:-3] + "y"
    elif word.endswith("ed") and len(word) >= 5:
        word = word[:-2]
    else:
        return word[:-1] if word.endswith("e") and len(word) >= 4 else word
    if len(word) >= 4 and word[-1] == word[-2] and word[-1] in _UNDOUBLED:
        word = word[:-1]
    return word[:-1] if word.endswith("e") and len(word) >= 4 else word


@functools.lru_cache(maxsize=1 << 14)
def head(word: str) -> str:
    """What dedup aligns a word by: the first `HEAD` letters of its key (all of a shorter
    one). Cached: it is read for every unshared word of every candidate on add."""
    return key(word)[:HEAD]
