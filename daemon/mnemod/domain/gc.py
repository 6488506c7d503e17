"""The GC plan: what a GC run would do, computed without touching anything.

The engine applies the plan (or, in a dry run, only reports it). Steps in order: expire,
dedup-merge (non-chaining groups), mark promotable, and promote when the policy is `auto`.

Merges are found from a `KeywordIndex` (domain.similar_pairs): given the engine's, kept in
step with its entries, a plan looks only from the entries changed since the last applied
plan, with word weights from document frequencies the index keeps fixed for a while
(`KeywordIndex.changes`), and after a plan was applied what it changed itself is looked
from at once (`examining`); without one, from every entry. Either way it forms the groups
the exhaustive pass over every pair forms with the same frequencies
(domain.dedup.merge_groups; tests/test_gc_plan.py checks it).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from mnemod.config import Config
from mnemod.domain.dedup import (
    TECHNIQUES,
    Side,
    compare,
    jaccard_floor,
    penalty_ceiling,
    unworded_score,
    weight,
)
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
from mnemod.domain.text_cues import negated

SCAN_STEP = 500  # entries looked at between two yields of `planning`
POST_STEP = 300  # entries posted again, likewise
GROUP_STEP = 10  # groups decided, likewise (50 took up to 60 ms at 100,000)


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
    (the same calls and the same order of sums: the same scores to the last bit), and the
    sums read the weights in C."""

    def __init__(self, frequency: Callable[[str], int], others: int) -> None:
        self.frequency, self.others = frequency, others
        self._shared = WordWeights(self, 2)  # held by both of the pair
        self._apart = WordWeights(self, 1)  # by one

    def jaccard(self, a: frozenset[str], b: frozenset[str]) -> float:
        common = sum(map(self._shared.__getitem__, a & b))
        apart = sum(map(self._apart.__getitem__, a ^ b))
        return common / (common + apart) if common + apart else 0.0


class WordWeights(dict[str, float]):
    """Each word's weight when `held` entries of the pair hold it, computed when first read."""

    def __init__(self, weights: StoreWeights, held: int) -> None:
        super().__init__()
        self.weights, self.held = weights, held

    def __missing__(self, word: str) -> float:
        found = self[word] = weight(self.weights.others, self.weights.frequency(word) - self.held)
        return found


# the techniques the rule reads per pair; the negation guard it reads from each entry's
# cached cue, and only for a pair that passes all the rest (the verdict is the same)
PAIR_TECHNIQUES = TECHNIQUES - {"negation"}
FEATURES_HELD = 4096  # entries whose features (domain.dedup.Side, negation) a rule keeps


class Features:
    """What the rule reads of each entry, computed once while it is met again and again
    (an entry meets its near-duplicates one after another): its Side and whether it
    negates. At most FEATURES_HELD entries are kept (then the cache starts afresh)."""

    def __init__(self) -> None:
        self._held: dict[str, tuple[Side, bool]] = {}

    def of(self, entry: Entry) -> tuple[Side, bool]:
        found = self._held.get(entry.id)
        if found is None or found[0].text is not entry.content:
            if len(self._held) >= FEATURES_HELD:
                self._held.clear()
            found = self._held[entry.id] = (Side.of(entry), negated(entry.content))
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
    features = Features()
    bound = dedup_config.threshold - 1e-9  # as compare's
    late_negation = "negation" in TECHNIQUES
    balanced = "balance" in TECHNIQUES and "containment" not in TECHNIQUES
    refused = Verdict(None)

    def rule(a: Entry, b: Entry, jaccard: float) -> Verdict:
        # the score is at most the balance of the lengths (compare's "balance"): a pair
        # far apart in length is refused without reading its words
        longer = max(a.tokens, b.tokens)
        if balanced and longer > 0 and min(a.tokens, b.tokens) / longer < bound:
            return refused
        kind = a.type
        if kind not in weights:

            def frequency(word: str, kind: str = kind) -> int:
                return counts.frequency.get((kind, word), 0)

            weights[kind] = StoreWeights(frequency, counts.per_kind.get(kind, 0) - 2)
        (left, says_no), (right, other_says_no) = features.of(a), features.of(b)
        # the penalties only lower the score: what cannot reach the threshold after the
        # least of them is refused unread (compare would refuse it by its score)
        unworded = unworded_score(left, right, jaccard, weights[kind], PAIR_TECHNIQUES)
        if unworded + penalty_ceiling(left, right, PAIR_TECHNIQUES) < bound:
            return refused
        verdict = compare(
            left, right, dedup_config, weights[kind], PAIR_TECHNIQUES, unworded=unworded
        )
        if not verdict.merges or (late_negation and says_no != other_says_no):
            return refused
        return Verdict(verdict.score)

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
    expired = plan.expired = yield from expired_among(entries, now)
    if expire_only:
        return plan
    if index is None:
        index = KeywordIndex()
        index.complete = False
    if not index.complete:
        for start in range(0, len(ids), SCAN_STEP):
            for entry_id in ids[start : start + SCAN_STEP]:
                entry = entries.get(entry_id)
                if entry is not None and entry_id not in index:
                    index.hold(entry)
            yield
        index.complete = True
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
    for number, (survivor_id, others_ids) in enumerate(plan.merges):
        if number % SCAN_STEP == SCAN_STEP - 1:
            yield
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


def expired_among(entries: Mapping[str, Entry], now: datetime) -> Generator[None, None, list[str]]:
    """The ids of the entries expired at `now`, found `SCAN_STEP` entries a step."""
    ids = list(entries)
    expired: list[str] = []
    for start in range(0, len(ids), SCAN_STEP):
        for entry_id in ids[start : start + SCAN_STEP]:
            entry = entries.get(entry_id)
            if entry is not None and is_expired(entry, now):
                expired.append(entry_id)
        yield
    return expired


def examining(
    entries: Mapping[str, Entry], config: Config, now: datetime, index: KeywordIndex
) -> Generator[None, None, Settlement]:
    """The pairs of the entries `index` holds marked, judged now: run after a plan was
    applied and settled, it looks from what that GC changed itself (the merges'
    survivors, whose keywords grew), so that the next GC looks only from what changes
    after. Settling its result unmarks them and keeps the pairs accepted as pending: the
    next plan judges those again (each changed entry's pairs are looked for from it), so it
    forms the groups it would form looking from every entry examined here. In steps, as
    `planning`; entries changed meanwhile stay marked."""
    expired = yield from expired_among(entries, now)
    changes = index.changes(config.dedup, absent=expired)
    assert index.weights is not None  # taken by `changes`
    floor, rule = merge_rule(config, index.weights)
    live = Live(entries, set(expired))
    similar, pending = yield from finding_pairs(index, changes, live, floor, rule)
    accepted = {(a, b) for a, partners in similar.items() for b in partners if a < b}
    return Settlement(changes.upto, changes.rule, frozenset(), frozenset(pending | accepted))


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
