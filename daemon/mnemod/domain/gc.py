"""The GC plan: what a GC run would do, computed without touching anything.

The engine applies the plan (or, in a dry run, only reports it). Steps in order: expire,
dedup-merge (non-chaining groups), mark promotable, and promote when the policy is `auto`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from mnemod.config import Config
from mnemod.domain.dedup import merge_groups
from mnemod.domain.merge import MergeKind, decide_merge, merge_into
from mnemod.domain.model import Entry
from mnemod.domain.retention import is_expired


@dataclass
class GcPlan:
    expired: list[str] = field(default_factory=list)
    merges: list[tuple[str, list[str]]] = field(default_factory=list)  # survivor, folded (in order)
    newly_promotable: list[str] = field(default_factory=list)
    promote: list[str] = field(default_factory=list)

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


def plan_gc(
    entries: list[Entry], config: Config, now: datetime, expire_only: bool = False
) -> GcPlan:
    """`expire_only` is the frequent, cheap sweep; the full run also merges and promotes."""
    plan = GcPlan()
    live: list[Entry] = []
    for entry in entries:
        if is_expired(entry, now):
            plan.expired.append(entry.id)
        else:
            live.append(entry)
    if expire_only:
        return plan
    folded: set[str] = set()
    for group in merge_groups(live, config.dedup):
        survivor, *others = group
        taken = _mergeable(survivor, others, now)
        if taken:
            plan.merges.append((survivor.id, [o.id for o in taken]))
            folded.update(o.id for o in taken)
    by_id = {e.id: e for e in live}
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


def _mergeable(survivor: Entry, others: list[Entry], now: datetime) -> list[Entry]:
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
