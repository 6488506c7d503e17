"""Merging two entries that say the same thing, without losing what either said (docs/design.md §1).

`decide_merge` is the whole rule, pure: given the older and the newer entry (dedup already
found them one memory) it says whether they merge at all, whose text the survivor keeps,
and which texts leave the index, each to be archived with its reason:

- they contradict (a number, a day or month replaced, or one negates where the other does
  not) and the newer repeats the rest of the older: **supersede** — the survivor takes the
  newer text; the older is archived, `superseded by <newer id>`;
- they contradict and the older says more besides: **keep apart** — both stay live;
- the newer only repeats part of the older (its keywords are a subset): **fold** — the
  survivor keeps the older, fuller text; the newer is archived, `merged into <survivor id>`;
- otherwise (the newer says more, or says it differently): **fold** — the survivor takes
  the newer text; the older is archived, `merged into <survivor id>`.

`merge_into` applies a fold or a supersede to the fields: the older entry's id survives;
importance is the max; keywords (after a supersede: the newer's), tags and triggers are
unions; access counts add up; `merged_from` records every folded id.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Literal

from mnemod.domain import text_cues as cues
from mnemod.domain.model import Entry

_TIER_RANK = {"cold": 0, "warm": 1, "hot": 2}
Role = Literal["older", "newer"]


class MergeKind(StrEnum):
    KEEP_APART = "keep_apart"
    FOLD = "fold"
    SUPERSEDE = "supersede"


@dataclass(frozen=True)
class MergeDecision:
    kind: MergeKind
    keep: Role  # whose text the survivor holds
    archive: tuple[tuple[Role, str], ...]  # whose text leaves the index, and the reason
    conflicts: tuple[str, ...] = ()  # what the two contradict on: numbers, days, negation

    def as_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind.value,
            "keep": self.keep,
            "archive": [{"text_of": role, "reason": reason} for role, reason in self.archive],
            "conflicts": list(self.conflicts),
        }


def conflicts(older: str, newer: str) -> tuple[str, ...]:
    """What the two texts contradict on: a number or a day/month one replaces with another
    ("Tuesdays" then "Thursdays"), or one negating where the other does not."""
    found = []
    if cues.replaced(cues.numbers(older), cues.numbers(newer)):
        found.append("numbers")
    if cues.replaced(cues.days(older), cues.days(newer)):
        found.append("days")
    if cues.negated(older) != cues.negated(newer):
        found.append("negation")
    return tuple(found)


def decide_merge(older: Entry, newer: Entry) -> MergeDecision:
    """How `newer` merges into `older` (the survivor, whose id stays), by the table above."""
    survivor = older.id
    contradicted = conflicts(older.content, newer.content)
    mine, theirs = set(older.keywords), set(newer.keywords)
    if contradicted:
        changed = _cue_words(older.content) | _cue_words(newer.content)
        if mine - changed <= theirs:
            return MergeDecision(
                MergeKind.SUPERSEDE,
                "newer",
                (("older", f"superseded by {newer.id}"),),
                contradicted,
            )
        return MergeDecision(MergeKind.KEEP_APART, "older", (), contradicted)
    if theirs <= mine:
        return MergeDecision(MergeKind.FOLD, "older", (("newer", f"merged into {survivor}"),))
    return MergeDecision(MergeKind.FOLD, "newer", (("older", f"merged into {survivor}"),))


def _cue_words(text: str) -> set[str]:
    """The keywords a contradiction is about (its numbers, days, months, refusals), which a
    superseding text may change without saying less."""
    changed = set(cues.numbers(text)) | set(cues.days(text))
    changed |= {w for w in cues.words(text) if w in cues.NEGATIONS}
    return {part for value in changed for part in _parts(value)}


def _parts(value: str) -> list[str]:
    """A cue as keywords index it: "10:00" is "10" and "00"; "tuesday" also "tuesdays"."""
    pieces = value.replace(",", ".").replace(":", ".").replace("/", ".").split(".")
    return [value, *pieces, value + "s", value.removesuffix("s")]


def older_first(a: Entry, b: Entry) -> tuple[Entry, Entry]:
    return (a, b) if (a.created_at, a.id) <= (b.created_at, b.id) else (b, a)


def merge_into(survivor: Entry, folded: Entry, now: datetime, decision: MergeDecision) -> Entry:
    """Fold `folded` into `survivor` in place as `decision` says and return it. Pure of I/O."""
    keep, superseded = decision.keep, decision.kind is MergeKind.SUPERSEDE
    if keep == "newer":
        survivor.content = folded.content
        survivor.tokens = folded.tokens
    survivor.key = survivor.key or folded.key
    survivor.importance = max(survivor.importance, folded.importance)
    if superseded:  # the words of the superseded text no longer lead here
        survivor.keywords = tuple(folded.keywords)
    else:
        survivor.keywords = _union(survivor.keywords, folded.keywords)
    survivor.tags = _union(survivor.tags, folded.tags)
    survivor.triggers = _union(survivor.triggers, folded.triggers)
    if _TIER_RANK.get(folded.tier, 0) > _TIER_RANK.get(survivor.tier, 0):
        survivor.tier = folded.tier
    survivor.once = survivor.once or folded.once
    survivor.access_count += folded.access_count
    survivor.selected_count += folded.selected_count
    survivor.last_accessed_at = max(survivor.last_accessed_at, folded.last_accessed_at)
    survivor.promotable = survivor.promotable or folded.promotable
    survivor.merged_from = _union(survivor.merged_from, (folded.id, *folded.merged_from))
    survivor.updated_at = max(now, survivor.updated_at)
    return survivor


def _union(first: Sequence[str], second: Sequence[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys([*first, *second]))
