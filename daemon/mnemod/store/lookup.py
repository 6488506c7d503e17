"""In-memory lookups over the L3 entries: keyword postings (dedup candidates), key labels,
and the aliases merges leave behind (a folded id leads to its survivor).

The entries of one type whose keyword-set sizes lie in one band (ratio `GC_BAND`, as
GC's index) form a class (domain.size_classes), and each has a slot there (a small
integer; a freed slot is taken again first, so the slots stay dense). A word's postings in
a class are a set of slots: a Python int used as a bitmap (`domain.bitsets`) once the word
is held by 1 in 256 of the class (`DENSE_SHARE`), an array of slots below. The postings
are kept by word, then by class, so a lookup reads each of the new text's words from
memory once, not once per class. `similar` counts, per band that can reach the floor, how
many of the new text's words each entry holds, with bitmap operations in C, and keeps the
entries that reach it at their own size: exactly the entries whose plain Jaccard reaches
the floor; a removal clears one bit per word (or takes one slot out of a short array).
A band holds a few sizes: a lookup counts about 6 bands' bitmaps where it counted 20
sizes' (at 100,000 LoCoMo varied copies 0.27 ms where it took 0.43, 88 % of the sizes
counted holding no entry that reaches the floor). Per entry it holds its distinct words
(a tuple, the entry's own when that is already one), its id and words by slot, and its
place (one int): at 100,000 memories about 212 bytes a memory besides the words
themselves (234 with a class per size).

Made with `words=False`, it keeps only the labels and aliases until its owner sets
`words` and feeds it the words of the entries it holds already (`add_words`: store.warming)."""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable

from mnemod.config import DedupConfig
from mnemod.domain.dedup import (
    ProbeWeights,
    Side,
    compare,
    jaccard_floor,
    penalty_ceiling,
    unworded_score,
)
from mnemod.domain.model import Entry
from mnemod.domain.size_classes import DENSE_SHARE, GC_BAND, Passing, SizeClasses
from mnemod.domain.text_cues import negated

MAX_ALIAS_HOPS = 100


class Holding(dict[str, int]):
    """How many entries of one type hold each word; 0 for a word none holds (read for
    every word of a new text and of its candidates: a missing word is not added)."""

    def __missing__(self, word: str) -> int:
        return 0


class Lookup:
    def __init__(
        self, words: bool = True, dense_share: int = DENSE_SHARE, band: float = GC_BAND
    ) -> None:
        self.words = words  # whether `add` indexes the entry's words
        self.keys: dict[str, str] = {}
        self.aliases: dict[str, str] = {}
        self._classes = SizeClasses(dense_share, band)  # see domain.size_classes
        self._frequency: dict[str, Holding] = {}  # by type: entries holding each word
        self._per_kind: Counter[str] = Counter()  # entries indexed, by type

    def add(self, entry: Entry) -> None:
        if self.words:
            self.add_words(entry)
        if entry.key:
            self.keys[entry.key] = entry.id
        for old_id in entry.merged_from:
            self.aliases[old_id] = entry.id

    def has_words(self, entry_id: str) -> bool:
        return entry_id in self._classes

    def add_words(self, entry: Entry) -> None:
        """Index the entry's words (replacing what was indexed of it)."""
        self._unindex(entry.id)
        keywords = entry.keywords
        words = tuple(dict.fromkeys(keywords))
        if isinstance(keywords, tuple) and len(words) == len(keywords):
            words = keywords  # held once, by the entry and here
        kind = entry.type
        self._classes.add(entry.id, kind, words)
        self._per_kind[kind] += 1
        holding = self._frequency.get(kind)
        if holding is None:
            holding = self._frequency[kind] = Holding()
        for word in words:
            holding[word] += 1

    def discard(self, entry: Entry) -> None:
        self._unindex(entry.id)
        if entry.key and self.keys.get(entry.key) == entry.id:
            del self.keys[entry.key]

    def _unindex(self, entry_id: str) -> None:
        """Forget an entry's words as they were indexed (its keywords or type may have
        changed since)."""
        indexed = self._classes.discard(entry_id)
        if indexed is None:
            return
        kind, words = indexed
        holding = self._frequency[kind]
        for word in words:
            left = holding[word] - 1
            if left:
                holding[word] = left
            else:
                del holding[word]
        self._per_kind[kind] -= 1

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
        threshold = jaccard_floor(config)  # the candidates' bound: plain keyword Jaccard
        mine = frozenset(entry.keywords)
        size = len(mine)
        indexed = entry.id in self._classes  # then its words are weighed as if it were not

        holding = self._frequency.get(kind) or Holding()
        stored: Callable[[str], int] = holding.__getitem__  # a dict's lookup, in C
        if indexed:

            def stored(word: str) -> int:
                return holding[word] - (word in mine)

        weights = ProbeWeights(mine, stored, max(0, self._per_kind[kind] - 1 - indexed))
        # the score is at most the balance of lengths: a candidate far longer or shorter
        # than `entry` is not compared. Its score before its penalties (unworded_score, the
        # credit for both texts negating capped at 1) is at most the balance too, and bounds
        # its score: the candidates are judged best bound first, each bound the balance
        # until that is its best and then refined to the unworded score plus the least
        # penalty the pair pays (penalty_ceiling: a pair too short to show a clause pays at
        # least CLAUSE_UNREAD), until no bound left can reach the best score found (or the
        # threshold). A candidate whose balance is below the best found is never scored,
        # one whose refined bound is below the threshold never judged
        length, bound = entry.tokens, config.threshold - 1e-9
        balanced: list[tuple[float, str, tuple[str, ...], int]] = []
        for other_id, listed, shared in self._passing(kind, mine, threshold):
            if other_id == entry.id:
                continue
            tokens = entries[other_id].tokens
            longer = max(length, tokens)
            balance = min(length, tokens) / longer if longer else 1.0
            if balance >= bound:
                balanced.append((balance, other_id, listed, shared))
        if not balanced:
            return None
        balanced.sort(key=_by_balance)
        # the new text's negation is read once; a candidate's only when the new text
        # negates (else the guard reads it, for a pair that would merge)
        probe = Side(mine, entry.content, length, negated(entry.content))
        # a heap: (−(unworded score + penalty_ceiling), id, unworded score, side)
        scored: list[tuple[float, str, float, Side]] = []
        best_id, best_score = "", -1.0
        at = 0
        while True:
            balance = balanced[at][0] if at < len(balanced) else -1.0
            top = -scored[0][0] if scored else -1.0
            if max(balance, top) < max(best_score, bound):
                break  # every one left scores below the best: ties cannot reach it either
            if balance >= top:
                _, other_id, listed, shared = balanced[at]
                at += 1
                other = entries[other_id]
                side = Side(frozenset(listed), other.content, other.tokens, None)
                if probe.negates:
                    side = side._replace(negates=negated(side.text))
                plain = shared / (size + len(listed) - shared)
                most = unworded_score(probe, side, plain, weights)
                at_most = most + penalty_ceiling(probe, side)
                if at_most >= bound:
                    heapq.heappush(scored, (-at_most, other_id, most, side))
                continue
            _, other_id, most, side = heapq.heappop(scored)
            verdict = compare(probe, side, config, weights, unworded=most)
            score = verdict.score
            if verdict.merges and (
                score > best_score or (score == best_score and other_id < best_id)
            ):
                best_id, best_score = other_id, score
        return (entries[best_id], best_score) if best_id else None

    def _passing(self, kind: str, mine: frozenset[str], threshold: float) -> Passing:
        """(id, distinct words, words shared) of every indexed entry of type `kind` whose
        plain Jaccard with `mine` is at least `threshold` (within float rounding): per class
        that can reach it, the slots held by enough of the words' postings
        (`SizeClasses.passing`)."""
        return self._classes.passing(mine, kind, threshold)


def _by_balance(candidate: tuple[float, str, object, int]) -> tuple[float, str]:
    """Largest balance first (then by id: the order does not change what is found)."""
    return -candidate[0], candidate[1]
