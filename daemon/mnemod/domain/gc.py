"""The GC plan: what a GC run would do, computed without touching anything.

The engine applies the plan (or, in a dry run, only reports it). Steps in order: expire,
dedup-merge (non-chaining groups), mark promotable, and promote when the policy is `auto`.

Merges are found from a `KeywordIndex` (domain.similar_pairs): given the engine's, kept in
step with its entries, a plan looks only from the entries changed since the last applied
plan, with word weights from document frequencies the index keeps fixed for a while
(`KeywordIndex.changes`); without one, from every entry. Either way it forms the groups the
exhaustive pass over every pair forms with the same frequencies
(domain.dedup.merge_groups; tests/test_gc_plan.py checks it).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Generator, Iterator, Mapping
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
    WordCounts,
    finding_pairs,
    grouping,
)
from mnemod.domain.steps import run_through

SCAN_STEP = 500  # entries looked at between two yields of `planning`
POST_STEP = 300  # entries posted again, likewise
GROUP_STEP = 50  # groups decided, likewise


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


def merge_rule(config: Config, counts: WordCounts) -> tuple[float, PairRule]:
    """The plain keyword Jaccard every merge reaches, and the rule deciding a pair that
    reaches it: domain.dedup.compare with word weights from the document frequencies
    `counts` (a KeywordIndex's `weights`), as domain.dedup.judged_pairs weighs them with
    the same counts. Its verdicts rest on the two entries and the counts alone: every
    refusal lasts (the index takes the counts again now and then, and the plan after
    looks from every entry). The rule reads `config.dedup` alone: the index settles
    under that section, and a plan under another looks from every entry."""
    dedup_config = config.dedup
    weights: dict[str, StoreWeights] = {}

    def rule(a: Entry, b: Entry, _jaccard: float) -> Verdict:
        kind = a.type
        if kind not in weights:

            def frequency(word: str, kind: str = kind) -> int:
                return counts.frequency.get((kind, word), 0)

            weights[kind] = StoreWeights(frequency, counts.per_kind.get(kind, 0) - 2)
        verdict = compare(Side.of(a), Side.of(b), dedup_config, weights[kind])
        return Verdict(verdict.score if verdict.merges else None)

    return jaccard_floor(dedup_config), rule


def plan_gc(
    entries: list[Entry],
    config: Config,
    now: datetime,
    expire_only: bool = False,
    index: KeywordIndex | None = None,
) -> GcPlan:
    """`planning` in one go, over a list of entries."""
    return run_through(
        planning({e.id: e for e in entries}, config, now, expire_only=expire_only, index=index)
    )


def planning(
    entries: Mapping[str, Entry],
    config: Config,
    now: datetime,
    expire_only: bool = False,
    index: KeywordIndex | None = None,
) -> Generator[None, None, GcPlan]:
    """The plan, made in steps: it yields every few hundred entries, and between yields the
    entries and the index may change (an entry changed meanwhile is left for the next
    plan: the caller re-checks each step against the entries as they are then).

    `expire_only` is the frequent, cheap sweep; the full run also merges and promotes.
    `index` is kept in step with `entries` by the caller (domain.similar_pairs.KeywordIndex,
    the engine's; one not `complete` is filled here first); without it the merges are
    looked for from every entry."""
    plan = GcPlan()
    ids = list(entries)
    expired: list[str] = []
    for start in range(0, len(ids), SCAN_STEP):
        for entry_id in ids[start : start + SCAN_STEP]:
            entry = entries.get(entry_id)
            if entry is not None and is_expired(entry, now):
                expired.append(entry_id)
        yield
    plan.expired = expired
    if expire_only:
        return plan
    floor = jaccard_floor(config.dedup)
    if index is None:
        index = KeywordIndex(floor)
        index.complete = False
    if not index.complete:
        for start in range(0, len(ids), SCAN_STEP):
            for entry_id in ids[start : start + SCAN_STEP]:
                entry = entries.get(entry_id)
                if entry is not None and entry_id not in index:
                    index.hold(entry)
            yield
        index.complete = True
        index.start_reorder(floor)  # the order of the words held now
    elif index.needs_reorder(floor):
        index.start_reorder(floor)
    while not index.repost(POST_STEP):
        yield
    gone = set(expired)
    live = Live(entries, gone)
    changes = index.changes(config.dedup, absent=expired)
    assert index.weights is not None  # taken by `changes`
    floor, rule = merge_rule(config, index.weights)
    similar, pending = yield from finding_pairs(index, changes, live, floor, rule)
    folded: set[str] = set()
    grouped: set[str] = set()
    groups = yield from grouping(similar, live)
    for number, group in enumerate(groups):
        if number % GROUP_STEP == GROUP_STEP - 1:
            yield
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
    merged_counts: dict[str, int] = {}
    for survivor_id, others_ids in plan.merges:
        members = [live.get(i) for i in (survivor_id, *others_ids)]
        merged_counts[survivor_id] = sum(e.access_count for e in members if e is not None)
    for start in range(0, len(ids), SCAN_STEP):
        for entry_id in ids[start : start + SCAN_STEP]:
            entry = live.get(entry_id)
            if entry is None or entry_id in folded:
                continue
            count = merged_counts.get(entry_id, entry.access_count)
            promotable = entry.promotable or count >= config.promotion.min_accesses
            if promotable and not entry.promotable:
                plan.newly_promotable.append(entry_id)
            if promotable and config.promotion.policy == "auto":
                plan.promote.append(entry_id)
        yield
    return plan


class Live(Mapping[str, Entry]):
    """The entries of a mapping but those in `gone` (the expired ones), without a copy."""

    def __init__(self, entries: Mapping[str, Entry], gone: set[str]) -> None:
        self.entries, self.gone = entries, gone

    def __getitem__(self, entry_id: str) -> Entry:
        if entry_id in self.gone:
            raise KeyError(entry_id)
        return self.entries[entry_id]

    def __contains__(self, entry_id: object) -> bool:
        return entry_id not in self.gone and entry_id in self.entries

    def __iter__(self) -> Iterator[str]:
        return (i for i in self.entries if i not in self.gone)

    def __len__(self) -> int:
        return len(self.entries) - sum(1 for i in self.gone if i in self.entries)


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
