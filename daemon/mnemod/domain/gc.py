"""The GC plan: what a GC run would do, computed without touching anything.

The engine applies the plan (or, in a dry run, only reports it). Steps in order: expire,
dedup-merge (non-chaining groups), mark promotable, and promote when the policy is `auto`.

Merges are found from a `KeywordIndex` (domain.similar_pairs): given the engine's, kept in
step with its entries, a plan looks only from the entries changed since the last applied
plan (and judges again the pairs whose refusal rested on word weights); without one, from
every entry. Either way it forms the groups the exhaustive pass over every pair forms
(domain.dedup.merge_groups; tests/test_gc_plan.py checks it).
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from mnemod.config import Config
from mnemod.domain.dedup import Side, compare, jaccard_floor, weight
from mnemod.domain.merge import MergeKind, decide_merge, merge_into
from mnemod.domain.model import Entry
from mnemod.domain.retention import is_expired
from mnemod.domain.similar_pairs import (
    KeywordIndex,
    PairRule,
    Settlement,
    Verdict,
    merge_groups,
    similar_pairs,
)


@dataclass
class GcPlan:
    expired: list[str] = field(default_factory=list)
    merges: list[tuple[str, list[str]]] = field(default_factory=list)  # survivor, folded (in order)
    newly_promotable: list[str] = field(default_factory=list)
    promote: list[str] = field(default_factory=list)
    # once the whole plan is applied, the engine passes it to KeywordIndex.settle (not
    # after a dry run or an expire-only sweep)
    settlement: Settlement | None = None

    def report(self, entries: list[Entry], dry_run: bool) -> GcReport:
        """What this plan does to `entries` (the L3 entries it was made from)."""
        merged = sum(len(folded) for _, folded in self.merges)
        return GcReport(
            expired=len(self.expired),
            merged=merged,
            kept=len(entries) - len(self.expired) - merged - len(self.promote),
            promotable=sum(1 for e in entries if e.promotable) + len(self.newly_promotable),
            promoted=len(self.promote),
            dry_run=dry_run,
            details={"expired": self.expired, "merges": self.merges, "promoted": self.promote},
        )


@dataclass(frozen=True)
class GcReport:
    expired: int
    merged: int
    kept: int
    promotable: int
    promoted: int
    dry_run: bool
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self, summary: bool = False) -> dict[str, Any]:
        return {
            "expired": self.expired,
            "merged": self.merged,
            "kept": self.kept,
            "promotable": self.promotable,
            "promoted": self.promoted,
            "dry_run": self.dry_run,
            **({"details": self.details} if self.details and not summary else {}),
        }


class StoreWeights:
    """domain.dedup.PairWeights for every pair of one type in one plan: a word's weight
    depends on the pair only through whether one or both hold it, so each is computed once
    (the same calls and the same order of sums: the same scores to the last bit)."""

    def __init__(self, frequency: Callable[[str], int], others: int) -> None:
        self.frequency, self.others = frequency, others
        self._shared: dict[str, float] = {}  # held by both of the pair
        self._apart: dict[str, float] = {}  # by one

    def jaccard(self, a: frozenset[str], b: frozenset[str]) -> float:
        common = sum(self._weight(w, self._shared, 2) for w in a & b)
        apart = sum(self._weight(w, self._apart, 1) for w in a ^ b)
        return common / (common + apart) if common + apart else 0.0

    def _weight(self, word: str, cache: dict[str, float], held: int) -> float:
        found = cache.get(word)
        if found is None:
            found = cache[word] = weight(self.others, self.frequency(word) - held)
        return found


def merge_rule(
    config: Config, index: KeywordIndex, absent: Iterable[Entry] = ()
) -> tuple[float, PairRule]:
    """The plain keyword Jaccard every merge reaches, and the rule deciding a pair that
    reaches it: domain.dedup.compare with word weights from the document frequencies of
    the live entries (the index's, less the indexed entries in `absent`), as
    domain.dedup.judged_pairs weighs them. A refusal by the score rests on those weights,
    so it does not last; by the floor or a guard, it does. The rule reads `config.dedup`
    alone: the index settles under that section, and a plan under another looks from every
    entry."""
    dedup_config = config.dedup
    gone: Counter[tuple[str, str]] = Counter()
    gone_kinds: Counter[str] = Counter()
    for entry in absent:
        if entry.id in index:
            gone.update((entry.type, word) for word in index.held[entry.id])
            gone_kinds[entry.type] += 1

    weights: dict[str, StoreWeights] = {}

    def rule(a: Entry, b: Entry, _jaccard: float) -> Verdict:
        kind = a.type
        if kind not in weights:

            def frequency(word: str, kind: str = kind) -> int:
                return index.holding(kind, word) - gone[(kind, word)]

            weights[kind] = StoreWeights(frequency, index.count(kind) - gone_kinds[kind] - 2)
        verdict = compare(Side.of(a), Side.of(b), dedup_config, weights[kind])
        if verdict.merges:
            return Verdict(verdict.score)
        return Verdict(None, lasting=verdict.refused_by != "score")

    return jaccard_floor(dedup_config), rule


def plan_gc(
    entries: list[Entry],
    config: Config,
    now: datetime,
    expire_only: bool = False,
    index: KeywordIndex | None = None,
) -> GcPlan:
    """`expire_only` is the frequent, cheap sweep; the full run also merges and promotes.

    `index` holds every entry of `entries` as it is now (domain.similar_pairs.KeywordIndex,
    kept by the engine); without it the merges are looked for from every entry."""
    plan = GcPlan()
    live: list[Entry] = []
    expired: list[Entry] = []
    for entry in entries:
        if is_expired(entry, now):
            plan.expired.append(entry.id)
            expired.append(entry)
        else:
            live.append(entry)
    if expire_only:
        return plan
    by_id = {e.id: e for e in live}
    floor = jaccard_floor(config.dedup)
    if index is None:
        index = KeywordIndex(floor, live)
    index.tune(floor)
    changes = index.changes(config.dedup)
    floor, rule = merge_rule(config, index, expired)
    similar, pending = similar_pairs(index, changes, by_id, floor, rule)
    folded: set[str] = set()
    grouped: set[str] = set()
    for group in merge_groups(similar, by_id):
        survivor, *others = group
        grouped.update(member.id for member in group)
        taken = mergeable(survivor, others, now)
        if taken:
            plan.merges.append((survivor.id, [o.id for o in taken]))
            folded.update(o.id for o in taken)
    # a group member that stays as it was (kept apart, or a survivor that took nothing)
    # stays marked: its pairs were similar and are looked at again
    plan.settlement = Settlement(
        changes.upto, changes.rule, frozenset(grouped - folded), frozenset(pending)
    )
    merged_counts: dict[str, int] = {e.id: e.access_count for e in live}
    for survivor_id, others_ids in plan.merges:
        merged_counts[survivor_id] += sum(by_id[o].access_count for o in others_ids)
    for entry in live:
        if entry.id in folded:
            continue
        promotable = entry.promotable or merged_counts[entry.id] >= config.promotion.min_accesses
        if promotable and not entry.promotable:
            plan.newly_promotable.append(entry.id)
        if promotable and config.promotion.policy == "auto":
            plan.promote.append(entry.id)
    return plan


def mergeable(survivor: Entry, others: list[Entry], now: datetime) -> list[Entry]:
    """The members that merge into `survivor`, in order, as the engine will fold them (each
    decided against the survivor as the previous folds leave it); those that contradict it
    and say more besides stay apart (domain.merge.decide_merge)."""
    state = copy.copy(survivor)
    taken = []
    for other in others:
        decision = decide_merge(state, other)
        if decision.kind is not MergeKind.KEEP_APART:
            merge_into(state, other, now, decision)
            taken.append(other)
    return taken
