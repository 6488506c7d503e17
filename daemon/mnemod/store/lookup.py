"""In-memory lookups over the L3 entries: keyword postings (dedup candidates), key labels,
and the aliases merges leave behind (a folded id leads to its survivor).

The postings of a word are kept by the size of each entry's keyword set, so that `similar`
reads only the sizes that can still reach the threshold (see `_candidates`).

Held for every entry, so kept small: postings are lists of ids (a list of five ids takes
two fifths of a dict's memory, a tenth of a set's; a removal scans one size's list of one
word) and each entry's words a tuple (a fifth of a frozenset); at 10,000 entries sets took
24 MB, more than the entries' own text.

Made with `words=False`, it keeps only the labels and aliases until its owner sets
`words` and feeds it the words of the entries it holds already (`add_words`: store.warming)."""

from __future__ import annotations

import functools
import itertools
import math
import operator
from collections import Counter, defaultdict
from collections.abc import Collection

from mnemod.config import DedupConfig
from mnemod.domain.dedup import (
    ProbeWeights,
    Side,
    compare,
    jaccard_floor,
    rare_first,
    unworded_score,
)
from mnemod.domain.model import Entry

MAX_ALIAS_HOPS = 100
# postings read past the prefix filter, to count a candidate's hits (see Lookup._candidates)
READ_AHEAD = 2
# entries of a type from which counting pays: below, the postings are short, and
# intersecting every set they hold costs less than counting (bench/scale.py)
COUNT_FROM = 5_000
SLACK = 1e-6  # float rounding in the bound: never leaves out a set that passes


class Lookup:
    def __init__(self, words: bool = True, count_from: int = COUNT_FROM) -> None:
        self.words = words  # whether `add` indexes the entry's words
        self.count_from = count_from  # see _candidates
        self.keys: dict[str, str] = {}
        self.aliases: dict[str, str] = {}
        # (type, word) -> size of the entry's keyword set -> entry ids
        self._postings: dict[tuple[str, str], dict[int, list[str]]] = defaultdict(dict)
        self._frequency: dict[tuple[str, str], int] = defaultdict(int)
        self._sets: dict[str, tuple[str, ...]] = {}  # distinct words, as indexed
        self._kinds: dict[str, str] = {}
        self._per_kind: Counter[str] = Counter()  # entries indexed, by type

    def add(self, entry: Entry) -> None:
        if self.words:
            self.add_words(entry)
        if entry.key:
            self.keys[entry.key] = entry.id
        for old_id in entry.merged_from:
            self.aliases[old_id] = entry.id

    def has_words(self, entry_id: str) -> bool:
        return entry_id in self._kinds

    def add_words(self, entry: Entry) -> None:
        """Index the entry's words (replacing what was indexed of it)."""
        self._unindex(entry.id)
        words = self._sets[entry.id] = tuple(dict.fromkeys(entry.keywords))
        self._kinds[entry.id] = entry.type
        self._per_kind[entry.type] += 1
        for word in words:
            self._postings[(entry.type, word)].setdefault(len(words), []).append(entry.id)
            self._frequency[(entry.type, word)] += 1

    def discard(self, entry: Entry) -> None:
        self._unindex(entry.id)
        if entry.key and self.keys.get(entry.key) == entry.id:
            del self.keys[entry.key]

    def _unindex(self, entry_id: str) -> None:
        """Forget an entry's words as they were indexed (its keywords or type may have
        changed since)."""
        words = self._sets.pop(entry_id, ())
        kind = self._kinds.pop(entry_id, None)
        if kind is None:
            return
        self._per_kind[kind] -= 1
        for word in words:
            by_size = self._postings[(kind, word)]
            by_size[len(words)].remove(entry_id)
            self._frequency[(kind, word)] -= 1
            if not by_size[len(words)]:
                del by_size[len(words)]
            if not by_size:
                del self._postings[(kind, word)]
                del self._frequency[(kind, word)]

    def alias(self, old_id: str, survivor_id: str) -> None:
        self.aliases[old_id] = survivor_id

    def resolve_id(self, entry_id: str) -> str:
        """Follow merges: the id of the entry that now holds `entry_id`'s memory."""
        for _ in range(MAX_ALIAS_HOPS):
            if entry_id not in self.aliases:
                break
            entry_id = self.aliases[entry_id]
        return entry_id

    def similar(
        self, entry: Entry, entries: dict[str, Entry], config: DedupConfig
    ) -> tuple[Entry, float] | None:
        """The same-type entry that is one memory with `entry` (domain.dedup.compare at the
        default techniques) with the best score, and that score. `entry` need not be
        indexed; if it is, its own words do not count toward the weights. Word weights count
        the stored entries other than the candidate."""
        kind = entry.type
        frequency = self._frequency
        threshold = jaccard_floor(config)  # the candidates' bound: plain keyword Jaccard
        ordered = rare_first(entry.keywords, lambda w: frequency.get((kind, w), 0))
        mine = frozenset(ordered)
        size = len(mine)
        sets = self._sets
        indexed = entry.id in self._kinds  # then its words are weighed as if it were not

        def stored(word: str) -> int:
            return frequency.get((kind, word), 0) - (indexed and word in mine)

        weights = ProbeWeights(mine, stored, max(0, self._per_kind[kind] - 1 - indexed))
        # the score is at most the balance of lengths: a candidate far longer or shorter
        # than `entry` is not compared
        length, bound = entry.tokens, config.threshold - 1e-9
        probe = Side(mine, entry.content, length)
        # each candidate's score before its penalties (unworded_score) bounds its score: they are
        # judged best bound first, until no bound left can reach the best score found
        bounded: list[tuple[float, str, Side]] = []
        for other_id in self._floor_passing(
            self._candidates(kind, ordered, threshold), mine, threshold
        ):
            if other_id == entry.id:
                continue
            listed = sets[other_id]
            shared = len(mine.intersection(listed))
            plain = shared / (size + len(listed) - shared)
            if plain < threshold - 1e-9:
                continue
            other = entries[other_id]
            longer = max(length, other.tokens)
            if longer and min(length, other.tokens) < bound * longer:
                continue
            side = Side(frozenset(listed), other.content, other.tokens)
            most = unworded_score(probe, side, plain, weights)
            if most >= bound:
                bounded.append((-most, other_id, side))
        bounded.sort()
        best_id, best_score = "", -1.0
        for most, other_id, side in bounded:
            if -most < best_score:
                break  # every one left scores below the best: ties cannot reach it either
            verdict = compare(probe, side, config, weights, unworded=-most)
            score = verdict.score
            if verdict.merges and (
                score > best_score or (score == best_score and other_id < best_id)
            ):
                best_id, best_score = other_id, score
        return (entries[best_id], best_score) if best_id else None

    def _floor_passing(self, candidates: set[str], mine: frozenset[str], t: float) -> list[str]:
        """The candidates whose plain Jaccard with `mine` may reach the floor t (within
        SLACK; `similar` checks it exactly), filtered in C: with s words shared of m, J ≥ t
        is s(1 + t) − t·m ≥ t·n. A loop over a few dozen candidates an add was most of the
        cost of dedup in a store of a few thousand entries."""
        n = len(mine)
        sets = list(map(self._sets.__getitem__, candidates))
        shared = map(len, map(mine.intersection, sets))
        margin = map(operator.sub, map((1 + t).__mul__, shared), map(t.__mul__, map(len, sets)))
        return list(itertools.compress(candidates, map((t * n - SLACK).__le__, margin)))

    def _candidates(self, kind: str, ordered: list[str], threshold: float) -> set[str]:
        """Every indexed entry whose keyword set may have plain Jaccard ≥ `threshold` with
        `ordered` (distinct words, rarest first), and a few that do not.

        A set of size m reaches it with s shared words when s ≥ r(m) = t(n + m)/(1 + t), so
        it holds one of our first n − r(m) + 1 words (the prefix filter, per size): only
        those postings could find it. Reading READ_AHEAD more of them and counting its hits
        there, c, bounds s by c plus the words not read, so one with c < r(m) − (words not
        read) is left out unseen. At 100k memories that reads ~2× the postings of the bare
        prefix filter and leaves ~35× fewer candidates (each a set intersection), and the
        common words at the end of `ordered` are still never read. In a smaller store (see
        COUNT_FROM) the bare prefix filter is used."""
        ahead = READ_AHEAD if self._per_kind[kind] >= self.count_from else 0
        furthest, plan = _plan(len(ordered), threshold, ahead)
        read: dict[int, list[list[str]]] = {}  # per size, the postings it reads
        for position, word in enumerate(ordered[:furthest], start=1):
            for m, ids in self._postings.get((kind, word), {}).items():
                planned = plan.get(m)
                if planned is not None and position <= planned[0]:
                    read.setdefault(m, []).append(ids)
        met: set[str] = set()
        for m, postings in read.items():
            met |= _held_by_at_least(postings, plan[m][1])
        return met


def _held_by_at_least(postings: list[list[str]], needed: int) -> set[str]:
    """The ids in at least `needed` of `postings`, by set operations (in C): the ids seen
    in at least j + 1 of the lists read so far are `levels[j]`; a level that can no longer
    reach `needed` with the lists left is not kept up. At 100,000 memories a third less CPU
    than counting every id (a Counter of each size's postings)."""
    if needed <= 1:
        return set().union(*postings)
    top, last = needed - 1, len(postings) - 1
    if last < top:
        return set()
    levels: list[set[str]] = [set() for _ in range(needed)]
    for i, ids in enumerate(postings):
        low = max(0, top - (last - i))  # the lowest level still able to reach the top
        now: Collection[str] = set(ids) if i < last or low == 0 else ids
        for j in range(min(top, i), max(low, 1) - 1, -1):
            if levels[j - 1]:
                levels[j] |= levels[j - 1].intersection(now)
        if low == 0:
            levels[0].update(now)
    return levels[top]


@functools.lru_cache(maxsize=1024)
def _plan(n: int, threshold: float, ahead: int) -> tuple[int, dict[int, tuple[int, int]]]:
    """What `Lookup._candidates` reads for a set of `n` words: per size of the other set,
    how many of our words (rarest first) and how many hits in them it needs; and the most
    words any size needs."""
    plan: dict[int, tuple[int, int]] = {}
    for m in range(math.ceil(threshold * n - 1e-9), math.floor(n / threshold + 1e-9) + 1):
        needed = math.ceil(threshold * (n + m) / (1 + threshold) - SLACK)
        read = min(n, n - needed + 1 + ahead)
        plan[m] = (read, needed - (n - read))
    return max((read for read, _ in plan.values()), default=0), plan
