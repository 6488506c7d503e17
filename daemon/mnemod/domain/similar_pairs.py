"""Near-duplicate pairs found without comparing every pair, nor again what did not change.

`KeywordIndex` holds the entries' keywords, posted by type and set-size band (domain.
size_classes), and remembers which entries were added or changed since the last GC plan
was applied. A plan looks for pairs from those entries only, each finding exactly the
entries whose plain Jaccard with it reaches the floor (`KeywordIndex.passing`); they are
judged by a pair rule that may only refuse more than the plain Jaccard floor.

Why that finds every pair an exhaustive pass merges: groups are formed greedily (oldest
first, each entry taking its most similar ungrouped partners, `merge_groups`), so an entry
left ungrouped has every partner grouped (its first free partner would have joined it).
Every accepted pair thus had an entry in a group, which was folded (gone), is a survivor
changed by the merge (added again, so marked), or did not change (kept apart, or a
survivor that took nothing): the plan's `Settlement` keeps those marked. A refusal that
rests on the two entries alone holds while they do not change: the floor, a guard, and the
score, whose word weights come from document frequencies fixed when the plan's
`WordCounts` were taken (taken again after a share of the store changed: that plan looks
from every entry). A rule whose refusal rests on more (`Verdict.lasting` false) has such
pairs judged again at every plan (`Changes.pending`). So the pairs accepted now are
exactly those found from the marked entries and the pending pairs, and grouping them
forms the groups grouping every pair forms.

A plan can be made in slices (`finding_pairs` yields between entries) while the entries
change: one changed after the plan's `Changes` were taken stays marked for the next plan,
so a pair judged on its old words is judged again then.

After a plan is applied, what it changed itself (the merges' survivors, marked again) can
be looked from at once (domain.gc.examining): the pairs accepted then are kept as pending
(judged again by the next plan) and the entries settled, so that the next plan looks
only from what changes after.

Memory: the postings (domain.size_classes), the word counts, the pending pairs and the
accepted pairs found; candidate pairs are never kept.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from collections.abc import Callable, Generator, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from mnemod.domain.model import Entry
from mnemod.domain.size_classes import GC_BAND, GC_DENSE_SHARE, Passing, SizeClasses
from mnemod.domain.steps import run_through


class Verdict(NamedTuple):
    """A pair rule's answer: the score the pair merges with (it orders a group's
    partners), or None; `lasting` says whether a refusal holds as long as the two entries do
    not change (False when it also rests on the rest of the store, such as word weights
    from document frequencies: the pair is judged again at every plan)."""

    score: float | None
    lasting: bool = True


# decides a pair of the same type (the smaller id first) whose keyword Jaccard, given, is
# already ≥ the floor; it may only refuse more
PairRule = Callable[[Entry, Entry, float], Verdict]

# the share of the entries that may be added, changed or removed before the word counts
# a plan weighs words by are taken again (docs/design.md §1, "GC")
REWEIGH_AT = 0.2


@dataclass(frozen=True)
class WordCounts:
    """Document frequencies as they were when taken: how many entries of each type hold
    each word (`frequency`, keyed by (type, word)) and how many entries each type has."""

    frequency: Mapping[tuple[str, str], int]
    per_kind: Mapping[str, int]
    version: int = 0

    @classmethod
    def of(cls, entries: Iterable[Entry]) -> WordCounts:
        listed = list(entries)
        frequency = Counter((e.type, w) for e in listed for w in set(e.keywords))
        return cls(frequency, Counter(e.type for e in listed))

    @property
    def entries(self) -> int:
        return sum(self.per_kind.values())


def jaccard_rule(threshold: float) -> PairRule:
    """The plain rule: the Jaccard itself, when it reaches `threshold`."""

    def rule(_a: Entry, _b: Entry, score: float) -> Verdict:
        return Verdict(score if score >= threshold else None)

    return rule


@dataclass(frozen=True)
class Changes:
    """What a plan looks from: the entries changed up to stamp `upto` (every entry, when
    the index was never settled under pair rule `rule`), and the pairs of unchanged entries
    refused for now at the last plan (`pending`), to be judged again."""

    ids: tuple[str, ...]
    upto: int
    rule: Hashable
    pending: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True)
class Settlement:
    """What an applied plan leaves: entries changed up to `upto` count as unchanged, except
    `keep` (members of a group that did not change: they stay marked, so that their pairs
    are found again), and the pairs refused for now, `pending`."""

    upto: int
    rule: Hashable
    keep: frozenset[str] = frozenset()
    pending: frozenset[tuple[str, str]] = frozenset()


class KeywordIndex:
    """The keywords of the entries GC may merge, and those changed since the last plan.

    The caller keeps it in step with its entries: `add` when an entry is stored or any
    field the pair rule reads changes (its keywords, type, content...), `discard` when it
    leaves; after applying a whole plan, `settle` with the plan's `Changes`. Each entry's
    distinct words are posted by type and set-size band (domain.size_classes), so that
    `passing` finds exactly the entries whose plain Jaccard reaches a floor."""

    def __init__(
        self,
        entries: Iterable[Entry] = (),
        reweigh_at: float = REWEIGH_AT,
        dense_share: int = GC_DENSE_SHARE,
        band: float = GC_BAND,
    ) -> None:
        """`dense_share`, `band`: see domain.size_classes."""
        self.reweigh_at = reweigh_at
        self._classes = SizeClasses(dense_share, band)
        self._words: dict[str, tuple[str, ...]] = {}  # distinct, in the entry's order
        self._kinds: dict[str, str] = {}
        self._unposted: dict[str, None] = {}  # held, not posted yet (see `repost`)
        self._frequency: Counter[tuple[str, str]] = Counter()  # entries holding each word
        self._per_kind: Counter[str] = Counter()  # entries of each type
        self._changed: dict[str, int] = {}  # id -> the stamp of its last change
        self._stamp = 0
        self._settled_under: Hashable = None  # the pair rule of the last applied plan
        self._pending: frozenset[tuple[str, str]] = frozenset()
        self.weights: WordCounts | None = None  # the counts the pair rule weighs words by
        self._weights_drift = 0  # adds and discards since they were taken
        self.complete = True  # holds every entry of its owner (see `hold`)
        for entry in entries:
            self.add(entry)

    def __len__(self) -> int:
        return len(self._words)

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._words

    def add(self, entry: Entry) -> None:
        """Index `entry` (again, if it was: what was indexed is replaced) and mark it changed."""
        self.hold(entry)
        del self._unposted[entry.id]
        self._classes.add(entry.id, entry.type, self._words[entry.id])

    def hold(self, entry: Entry) -> None:
        """`add` without posting: the next `repost` posts it (building an index in slices)."""
        self._unindex(entry.id)
        keywords = entry.keywords
        words = tuple(dict.fromkeys(keywords))
        if isinstance(keywords, tuple) and len(words) == len(keywords):
            words = keywords  # held once, by the entry and here
        self._words[entry.id] = words
        self._kinds[entry.id] = entry.type
        self._count(entry.type, words, 1)
        self._unposted[entry.id] = None
        self._mark(entry.id)

    def discard(self, entry_id: str) -> None:
        """Forget an entry that left; a removal makes no pair similar, so nothing is marked."""
        self._unindex(entry_id)
        self._changed.pop(entry_id, None)
        self._weights_drift += 1

    def _mark(self, entry_id: str) -> None:
        self._stamp += 1
        self._changed[entry_id] = self._stamp
        self._weights_drift += 1

    @property
    def drift(self) -> int:
        """Adds and discards since the word counts were taken."""
        return self._weights_drift

    def discount(self, drift: int) -> None:
        """Adds and discards that do not count toward taking the word counts again: those
        of folding near-duplicates into their survivors (the folded entries' words are
        mostly the survivors' too: the frequencies fall about in proportion)."""
        self._weights_drift = max(0, self._weights_drift - drift)

    def changed_after(self, entry_id: str, upto: int) -> bool:
        """Whether `entry_id` changed (or left) after stamp `upto`."""
        return entry_id not in self._words or self._changed.get(entry_id, 0) > upto

    def changes(self, rule: Hashable, absent: Iterable[str] = ()) -> Changes:
        """What a plan under pair rule `rule` must look from: the entries changed since the
        last `settle`, or every entry when that was under another rule (a configuration
        reload that lowered the threshold makes pairs of unchanged entries similar) or
        under other word counts.

        The word counts (`weights`) are taken again, without the indexed entries in
        `absent` (expired ones), when there are none yet, or once more than `reweigh_at`
        of the entries they were taken from were added, changed or removed since (but for
        `discount`ed changes); a pair's verdict then rests on its two entries and those
        counts alone, so a refused pair needs judging again only when one of them changes
        or the counts are taken again (which looks from every entry)."""
        counts = self.weights
        if counts is None or self._weights_drift > self.reweigh_at * max(1, counts.entries):
            counts = self.weights = self._take_weights(absent, counts)
        settled = (rule, counts.version)
        if settled != self._settled_under:
            return Changes(tuple(self._words), self._stamp, settled)
        return Changes(tuple(self._changed), self._stamp, settled, self._pending)

    def _take_weights(self, absent: Iterable[str], last: WordCounts | None) -> WordCounts:
        frequency = Counter(self._frequency)
        per_kind = Counter(self._per_kind)
        for entry_id in absent:
            if entry_id in self._words:
                kind = self._kinds[entry_id]
                frequency.subtract((kind, word) for word in self._words[entry_id])
                per_kind[kind] -= 1
        self._weights_drift = 0
        version = 1 if last is None else last.version + 1
        return WordCounts(frequency, per_kind, version)

    def settle(self, settlement: Settlement) -> None:
        """`settling` in one go."""
        run_through(self.settling(settlement))

    def settling(self, settlement: Settlement) -> Generator[None, None, None]:
        """The plan that made `settlement` was applied whole: the entries it looked from
        are unchanged now, except those changed again since (the survivor of a merge) and
        those it keeps, which stay marked. It yields every `SCAN_STEP` entries (after a
        plan from scratch every entry is marked); entries may be added, changed or
        discarded meanwhile (they are marked anew, or forgotten)."""
        upto, keep = settlement.upto, settlement.keep
        changed = self._changed
        marked = list(changed)
        for start in range(0, len(marked), SCAN_STEP):
            for entry_id in marked[start : start + SCAN_STEP]:
                if changed.get(entry_id, upto + 1) <= upto:
                    del changed[entry_id]
            yield
        for entry_id in keep:  # marked (again, if settled) unless gone
            if entry_id in self._words and entry_id not in changed:
                changed[entry_id] = upto
        self._pending = settlement.pending
        self._settled_under = settlement.rule

    def holding(self, kind: str, word: str) -> int:
        """How many indexed entries of type `kind` hold `word`."""
        return self._frequency.get((kind, word), 0)

    def count(self, kind: str) -> int:
        """How many entries of type `kind` are indexed."""
        return self._per_kind.get(kind, 0)

    @property
    def ready(self) -> bool:
        """Every entry is posted: lookups find all."""
        return not self._unposted

    def repost(self, limit: int | None) -> bool:
        """Post up to `limit` (None: all) held entries not posted yet; True when none is left."""
        unposted = self._unposted
        count = len(unposted) if limit is None else min(limit, len(unposted))
        for _ in range(count):
            entry_id, _ = unposted.popitem()
            self._classes.add(entry_id, self._kinds[entry_id], self._words[entry_id])
        return not unposted

    def kind(self, entry_id: str) -> str:
        return self._kinds[entry_id]

    @property
    def held(self) -> Mapping[str, tuple[str, ...]]:
        """Each indexed entry's distinct keywords (not to be changed)."""
        return self._words

    def passing(
        self, words: Iterable[str], kind: str, floor: float, no_larger: bool = False
    ) -> Passing:
        """(id, distinct words, words shared) of every indexed entry of type `kind` whose
        plain Jaccard with `words` reaches `floor` (within SLACK: the caller checks it
        exactly); with `no_larger`, only those with no more keywords than `words`."""
        if self._unposted:
            raise ValueError("entries wait to be posted (repost)")
        mine = words if isinstance(words, frozenset) else frozenset(words)
        return self._classes.passing(mine, kind, floor, no_larger)

    def _count(self, kind: str, words: tuple[str, ...], by: int) -> None:
        frequency = self._frequency
        for word in words:
            frequency[(kind, word)] += by
            if not frequency[(kind, word)]:
                del frequency[(kind, word)]
        self._per_kind[kind] += by

    def _unindex(self, entry_id: str) -> None:
        """Forget an entry's postings as they were made (its keywords or type may have
        changed since)."""
        if entry_id not in self._words:
            return
        words = self._words.pop(entry_id)
        kind = self._kinds.pop(entry_id)
        self._count(kind, words, -1)
        if entry_id in self._unposted:
            del self._unposted[entry_id]
        else:
            self._classes.discard(entry_id)


def overlap_score(mine: frozenset[str], theirs: tuple[str, ...]) -> float:
    """Keyword Jaccard of two distinct-word collections, as the exhaustive pass computes it."""
    shared = len(mine.intersection(theirs))
    union = len(mine) + len(theirs) - shared
    return shared / union if union else 0.0


Found = tuple[dict[str, dict[str, float]], set[tuple[str, str]]]
STEP_ENTRIES = 4  # changed entries looked from between two yields of `finding_pairs`
SCAN_STEP = 5000  # changed ids gathered between two yields, likewise
SORT_STEP = 5000  # entries sorted by age between two yields of `grouping`


def similar_pairs(
    index: KeywordIndex,
    changes: Changes,
    entries: Mapping[str, Entry],
    floor: float,
    rule: PairRule,
) -> Found:
    """`finding_pairs` in one go."""
    return run_through(finding_pairs(index, changes, entries, floor, rule))


def finding_pairs(
    index: KeywordIndex,
    changes: Changes,
    entries: Mapping[str, Entry],
    floor: float,
    rule: PairRule,
) -> Generator[None, None, Found]:
    """The pairs `rule` accepts among those with a changed entry and Jaccard ≥ floor and
    the pending pairs of `changes`, as a map from each entry to its partners and their
    scores; and the pairs refused for now (`Verdict.lasting` false), to be judged again.
    It yields every `STEP_ENTRIES` entries; between yields the index and the entries may
    change (the module doc says why the plan stays exact).

    Entries not in `entries` (the live ones: an expired entry is indexed until it is
    dropped) take no part. Pairs of two unchanged entries are never looked at (but for
    the pending ones), and one of two changed entries once."""
    held = index.held
    changed_ids: set[str] = set()
    for start in range(0, len(changes.ids), SCAN_STEP):  # every entry, from scratch
        changed_ids.update(i for i in changes.ids[start : start + SCAN_STEP] if i in held)
        yield
    # when every entry changed, a pair is looked for from its larger entry alone (from
    # both when they are the same size, and checked from the smaller id)
    everything = len(changed_ids) == len(held)
    similar: dict[str, dict[str, float]] = defaultdict(dict)
    pending: set[tuple[str, str]] = set()

    nearby: list[str] = []  # the last entry's partners, looked from next

    def judge(a: Entry, b: Entry, jaccard: float) -> None:
        if b.id < a.id:
            a, b = b, a
        verdict = rule(a, b, jaccard)
        if verdict.score is not None:
            similar[a.id][b.id] = similar[b.id][a.id] = verdict.score
        elif not verdict.lasting:
            pending.add((a.id, b.id))

    for step, entry_id in enumerate(near_first(changed_ids, nearby)):
        if step % STEP_ENTRIES == STEP_ENTRIES - 1:
            yield
        nearby.clear()
        entry = entries.get(entry_id)
        if entry is None or entry_id not in held:
            continue
        mine = frozenset(held[entry_id])
        size = len(mine)
        kind = index.kind(entry_id)
        for other_id, theirs, shared in index.passing(mine, kind, floor, everything):
            nearby.append(other_id)
            if other_id <= entry_id and (
                other_id == entry_id
                or (other_id in changed_ids and (not everything or len(theirs) == size))
            ):
                continue
            jaccard = shared / (size + len(theirs) - shared)
            if jaccard >= floor and other_id in entries:
                judge(entry, entries[other_id], jaccard)
    for step, (a_id, b_id) in enumerate(changes.pending):
        if step % (STEP_ENTRIES * 50) == STEP_ENTRIES * 50 - 1:
            yield
        if a_id in changed_ids or b_id in changed_ids or a_id not in held or b_id not in held:
            continue  # looked for from a changed entry, or gone
        a, b = entries.get(a_id), entries.get(b_id)
        if a is not None and b is not None:
            judge(a, b, overlap_score(frozenset(held[a_id]), held[b_id]))
    return dict(similar), pending


def near_first(ids: set[str], nearby: list[str]) -> Iterator[str]:
    """Each of `ids` once, those in `nearby` (filled by the caller after each id with that
    entry's partners) before the rest, depth first: an entry's near-duplicates are judged
    one after another, while what the pair rule reads of each is still cached (text
    cues, features). The order changes no result."""
    done: set[str] = set()
    stack: list[str] = []
    for seed in ids:
        if seed in done:
            continue
        stack.append(seed)
        while stack:
            entry_id = stack.pop()
            if entry_id in done:
                continue
            done.add(entry_id)
            yield entry_id
            stack.extend(i for i in nearby if i in ids and i not in done)


def merge_groups(
    similar: Mapping[str, Mapping[str, float]], entries: Mapping[str, Entry]
) -> list[list[Entry]]:
    """`grouping` in one go."""
    return run_through(grouping(similar, entries))


def grouping(
    similar: Mapping[str, Mapping[str, float]], entries: Mapping[str, Entry]
) -> Generator[None, None, list[list[Entry]]]:
    """Groups (oldest first) in which every pair is similar; no chaining. Entries are taken
    oldest first; each opens a group and takes its ungrouped partners, most similar first,
    that are similar to every member taken so far. Entries not in `entries` (gone since
    the pairs were found) take no part. It yields every `STEP_ENTRIES` × 25 entries (and
    `SORT_STEP` sorted: one sort of them all took 120 ms at 100,000 entries)."""
    grouped: set[str] = set()
    groups: list[list[Entry]] = []
    runs: list[list[tuple[datetime, str]]] = []  # sorted a slice at a time, then merged
    ids = list(similar)
    for start in range(0, len(ids), SORT_STEP):
        run = [(entries[i].created_at, i) for i in ids[start : start + SORT_STEP] if i in entries]
        run.sort()
        runs.append(run)
        yield
    for step, (_, entry_id) in enumerate(heapq.merge(*runs)):
        if step % (STEP_ENTRIES * 25) == STEP_ENTRIES * 25 - 1:
            yield
        entry = entries.get(entry_id)
        if entry is None or entry_id in grouped:
            continue
        group = [entry]
        for other_id, _score in sorted(similar[entry.id].items(), key=lambda kv: (-kv[1], kv[0])):
            if other_id in grouped or other_id not in entries:
                continue
            if all(other_id in similar[member.id] for member in group[1:]):
                group.append(entries[other_id])
        if len(group) > 1:
            grouped.update(member.id for member in group)
            groups.append(group)
    return groups
