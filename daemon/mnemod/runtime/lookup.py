"""In-memory lookups over the L3 entries: keyword postings (dedup candidates), key labels,
and the aliases merges leave behind (a folded id leads to its survivor)."""

from __future__ import annotations

from collections import defaultdict

from mnemod.domain.dedup import prefix_length, rare_first
from mnemod.domain.model import Entry

MAX_ALIAS_HOPS = 100


class Lookup:
    def __init__(self) -> None:
        self.keys: dict[str, str] = {}
        self.aliases: dict[str, str] = {}
        self._postings: dict[tuple[str, str], set[str]] = defaultdict(set)
        self._sets: dict[str, frozenset[str]] = {}

    def add(self, entry: Entry) -> None:
        self._sets[entry.id] = frozenset(entry.keywords)
        for word in entry.keywords:
            self._postings[(entry.type, word)].add(entry.id)
        if entry.key:
            self.keys[entry.key] = entry.id
        for old_id in entry.merged_from:
            self.aliases[old_id] = entry.id

    def discard(self, entry: Entry) -> None:
        self._sets.pop(entry.id, None)
        for word in entry.keywords:
            ids = self._postings.get((entry.type, word))
            if ids is not None:
                ids.discard(entry.id)
                if not ids:
                    del self._postings[(entry.type, word)]
        if entry.key and self.keys.get(entry.key) == entry.id:
            del self.keys[entry.key]

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
        self, entry: Entry, entries: dict[str, Entry], threshold: float
    ) -> tuple[Entry, float] | None:
        """The best same-type entry whose keyword Jaccard passes `threshold`."""
        ordered = rare_first(entry.keywords, lambda w: len(self._postings.get((entry.type, w), ())))
        candidates: set[str] = set()
        for word in ordered[: prefix_length(len(ordered), threshold)]:
            candidates |= self._postings.get((entry.type, word), set())
        candidates.discard(entry.id)
        mine = frozenset(entry.keywords)
        size = len(mine)
        smallest, largest = threshold * size, size / threshold
        sets = self._sets
        best_id, best_score = "", threshold
        for other_id in candidates:
            theirs = sets[other_id]
            if not smallest <= len(theirs) <= largest:
                continue  # the size filter: J ≤ min/max of the two sizes
            shared = len(mine & theirs)
            score = shared / (size + len(theirs) - shared)
            if score > best_score or (score == best_score and (not best_id or other_id < best_id)):
                best_id, best_score = other_id, score
        return (entries[best_id], best_score) if best_id else None
