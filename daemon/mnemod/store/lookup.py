"""In-memory lookups over the L3 entries: keyword postings (dedup candidates), key labels,
and the aliases merges leave behind (a folded id leads to its survivor).

The postings of a word are kept by the size of each entry's keyword set, so that `similar`
reads only the sizes that can still reach the threshold (see there).

Held for every entry, so kept small: postings are lists of ids (a list of five ids takes
two fifths of a dict's memory, a tenth of a set's; a removal scans one size's list of one
word) and each entry's words a tuple (a fifth of a frozenset); at 10,000 entries sets took
24 MB, more than the entries' own text.

Made with `words=False`, it keeps only the labels and aliases until its owner sets
`words` and feeds it the words of the entries it holds already (`add_words`: store.warming)."""

from __future__ import annotations

from collections import Counter, defaultdict

from mnemod.config import DedupConfig
from mnemod.domain.dedup import (
    ProbeWeights,
    Side,
    compare,
    jaccard_floor,
    prefix_length,
    rare_first,
)
from mnemod.domain.model import Entry

MAX_ALIAS_HOPS = 100


class Lookup:
    def __init__(self, words: bool = True) -> None:
        self.words = words  # whether `add` indexes the entry's words
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
        indexed; if it is, its own words do not count toward the weights.

        Candidates pass the plain Jaccard floor t: they share a word of the rarest-first
        prefix (domain.dedup.prefix_length), and only sizes that can pass are read: a set
        of size m first met at the f-th of our n words shares at most n - f + 1 of them,
        and J ≥ t needs at least t(n + m)/(1 + t) shared, so m ≤ (n - f + 1)(1 + t)/t - n.
        The later prefix words are the common ones; at 100k entries this reads a fraction
        of their postings. Word weights count the stored entries other than the candidate."""
        kind = entry.type
        frequency = self._frequency
        threshold = jaccard_floor(config)  # the candidates' bound: plain keyword Jaccard
        ordered = rare_first(entry.keywords, lambda w: frequency.get((kind, w), 0))
        mine = frozenset(ordered)
        size = len(mine)
        smallest, largest = threshold * size - 1e-9, size / threshold + 1e-9
        candidates: set[str] = set()
        for first, word in enumerate(ordered[: prefix_length(size, threshold)], start=1):
            cap = min(largest, (size - first + 1) * (1 + threshold) / threshold - size + 1e-9)
            for length, ids in self._postings.get((kind, word), {}).items():
                if smallest <= length <= cap:
                    candidates.update(ids)
        candidates.discard(entry.id)
        sets = self._sets
        indexed = entry.id in self._kinds  # then its words are weighed as if it were not

        def stored(word: str) -> int:
            return frequency.get((kind, word), 0) - (indexed and word in mine)

        weights = ProbeWeights(mine, stored, max(0, self._per_kind[kind] - 1 - indexed))
        # the score is at most the balance of lengths: a candidate far longer or shorter
        # than `entry` is not compared
        length, bound = entry.tokens, config.threshold - 1e-9
        probe = Side(mine, entry.content, length)
        best_id, best_score = "", -1.0
        for other_id in candidates:
            listed = sets[other_id]
            shared = len(mine.intersection(listed))
            if shared / (size + len(listed) - shared) < threshold - 1e-9:
                continue
            other = entries[other_id]
            longer = max(length, other.tokens)
            if longer and min(length, other.tokens) < bound * longer:
                continue
            side = Side(frozenset(listed), other.content, other.tokens)
            verdict = compare(probe, side, config, weights)
            score = verdict.score
            if verdict.merges and (
                score > best_score or (score == best_score and other_id < best_id)
            ):
                best_id, best_score = other_id, score
        return (entries[best_id], best_score) if best_id else None
