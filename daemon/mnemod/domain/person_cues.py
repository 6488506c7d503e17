"""Person cues of a prompt: a question that asks for several things about someone it names.

"What activities does Melanie partake in?", "Which cities has Jon visited?": the answer is a
list gathered from many memories, each about one item of it ("I signed up for a pottery
class", "we went camping"), which share little with the question but the person. Where
memories are attributed (a name and a colon open the text, "Melanie: …", as transcripts and
agents' notes write them), the named person's own memories are the likelier answers, so they
rank higher (`Resolver`, `RankingSettings.speaker_weight`).

A question about one thing is left alone: it names its topic, which finds its answer, and the
person it names may be the wrong one (a question may credit one person with what another
said; favouring the named person's memories then buries the answer). Only reorders what
already matches, like the time cues. Pure; English question shapes only.
"""

from __future__ import annotations

import re

from mnemod.domain import text_cues as cues
from mnemod.domain.keywords import stem

# "what activities", "which cities", "what kinds of art", "what are some changes",
# "what are the names"; the word after is the thing asked for
_HEAD = re.compile(
    r"^\W*(?:what|which)\s+(?:(?P<kinds>kinds|types|sorts)\s+of\s+|(?:kind|type|sort)\s+of\s+)?"
    r"(?:(?:are|were)\s+(?:some\s+)?(?:of\s+)?)?(?:the\s+)?(?P<head>[^\W\d_]+)",
    re.IGNORECASE,
)
# questions about two people at once, or a count, gather several memories too
_SEVERAL = re.compile(r"\b(?:both|how many)\b", re.IGNORECASE)
# verbs and pronouns that end like plurals ("what does", "what has", "what this")
_NOT_PLURAL = frozenset(["does", "has", "was", "is", "this", "his", "its", "yours", "ours"])
# an attribution opening a memory: one to three words (capitalised: `speaker`), then a colon
_SPEAKER = re.compile(r"^\s*(?P<name>[^\W\d_][\w'’-]*(?:\s[^\W\d_][\w'’-]*){0,2}):\s")


def asks_for_several(prompt: str) -> bool:
    """A question after several things: a plural after what/which, "both" or "how many"."""
    found = _HEAD.match(prompt)
    if found is not None:
        if found["kinds"]:
            return True
        head = found["head"].casefold()
        if head not in _NOT_PLURAL and stem(head) != head:
            return True
    return _SEVERAL.search(prompt) is not None


def named(prompt: str) -> frozenset[str]:
    """The names a prompt mentions, casefolded, a possessive dropped ("Melanie's")."""
    return frozenset(
        name.removesuffix("'s").removesuffix("’s").removesuffix("'") for name in cues.names(prompt)
    )


def persons(prompt: str) -> frozenset[str]:
    """Whose memories the prompt favours: the names it mentions, if it asks for several
    things; else none."""
    if not asks_for_several(prompt):
        return frozenset()
    return named(prompt)


def speaker(content: str) -> str | None:
    """Who a memory is attributed to (capitalised words opening it before a colon),
    casefolded."""
    found = _SPEAKER.match(content)
    if found is None or not all(word[0].isupper() for word in found["name"].split()):
        return None
    return found["name"].casefold()
