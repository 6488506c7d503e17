"""Keyword postings by type and keyword-set size, for exact Jaccard candidates (GC's index
and the dedup lookup on add).

The entries of one type whose distinct keywords number m (or, with a band, as GC's index
and the dedup lookup keep them, whose m lie in one band of sizes: `GC_BAND`) form a
class; each has a slot there (a freed slot is taken again first, so the slots stay dense).
A word's postings in a class are a Python int used as a bitmap (`domain.bitsets`) once the
word is held by 1 in `DENSE_SHARE` of the class, else an array of slots: a bitmap costs a
bit per slot of the class, so it is kept only where it costs at most DENSE_SHARE / 8 bytes
a holder.

`passing` finds, per class whose size can reach the floor, the slots sharing enough words
with a set: those counted in enough of its words' bitmaps and short arrays
(`bitsets.held_by`, the bitmaps in C over machine words, the arrays shortest first and not
read once no slot can reach the floor). That is exactly the entries whose
plain Jaccard reaches the floor, at a cost set by the classes read, not by how long the
postings of common words are (GC's postings by the rarest words first read about 1,650
posted ids an entry at 100,000 LoCoMo memories, whose vocabulary is about 1,800 words).
"""

from __future__ import annotations

import functools
import heapq
import math
from array import array
from typing import TypeAlias

from mnemod.domain.bitsets import from_members, held_by, members

# a word held by 1 in this many of a class keeps its slots as a bitmap (at most 32 bytes a
# holder): the short arrays are what a lookup turns into bitmaps one slot at a time, its
# dearest part (1.3 times faster than at 1 in 64 for GC's plan and 1.25 for the dedup
# lookup at 100,000 memories)
DENSE_SHARE = 256
SLOT_BITS = 32  # an entry's place: its class's number above these bits, its slot below
SLOT_MASK = (1 << SLOT_BITS) - 1
SLACK = 1e-9  # the floor is met within float rounding (the caller checks it exactly)

Slots: TypeAlias = "int | array[int]"  # a bitmap, or the slots in an array('I')
Passing = list[tuple[str, tuple[str, ...], int]]  # id, its distinct words, words shared


class SizeClass:
    """The entries of one type whose keyword sets have one size, or one band of sizes
    (`size`: the size, or the band's number, see `band_of`), by slot. Its postings are
    kept in the type's word map (`by_word`: word -> size -> slots), shared
    with the type's other classes, so that a lookup reads each of its words' map once
    for all the classes it visits, where a map per class was read (from memory, cold)
    once per class."""

    __slots__ = ("by_word", "dense_share", "free", "ids", "size", "words")

    def __init__(
        self,
        dense_share: int = DENSE_SHARE,
        size: int = 0,
        by_word: dict[str, dict[int, Slots]] | None = None,
    ) -> None:
        self.dense_share, self.size = dense_share, size
        self.by_word: dict[str, dict[int, Slots]] = {} if by_word is None else by_word
        self.ids: list[str] = []  # by slot; "" for a free one
        self.words: list[tuple[str, ...]] = []  # by slot; () for a free one
        self.free: list[int] = []  # a heap: the lowest free slot is taken first

    def slots(self, word: str) -> Slots | None:
        """The postings of `word` in this class (None: no entry of it holds the word)."""
        return self.by_word.get(word, {}).get(self.size)

    def add(self, entry_id: str, words: tuple[str, ...]) -> int:
        if self.free:
            slot = heapq.heappop(self.free)
            self.ids[slot], self.words[slot] = entry_id, words
        else:
            slot = len(self.ids)
            self.ids.append(entry_id)
            self.words.append(words)
        by_word, size, dense_from = self.by_word, self.size, len(self.ids) // self.dense_share
        for word in words:
            postings = by_word.get(word)
            if postings is None:
                postings = by_word[word] = {}
            held = postings.get(size)
            if held is None:
                postings[size] = array("I", (slot,))
            elif isinstance(held, int):
                postings[size] = held | 1 << slot
            elif len(held) >= dense_from:
                postings[size] = from_members(held) | 1 << slot
            else:
                held.append(slot)
        return slot

    def remove(self, slot: int) -> None:
        words = self.words[slot]
        self.ids[slot], self.words[slot] = "", ()
        heapq.heappush(self.free, slot)
        by_word, size = self.by_word, self.size
        sparse_below = len(self.ids) // (2 * self.dense_share)
        for word in words:
            postings = by_word[word]
            held = postings[size]
            if isinstance(held, int):
                held ^= 1 << slot
                if not held:
                    del postings[size]
                elif held.bit_count() < sparse_below:
                    postings[size] = array("I", members(held))
                else:
                    postings[size] = held
            else:
                held.remove(slot)  # a short array: a small share of the class
                if not held:
                    del postings[size]
            if not postings:
                del by_word[word]

    def sharing(self, mine: frozenset[str], held: list[Slots], needed: int, out: Passing) -> None:
        """Append to `out` (id, distinct words, words shared) of each entry sharing at
        least `needed` (≥ 1) of `mine`, whose postings here are `held`: the slots counted
        in enough of them (`bitsets.held_by`: the bitmaps counted first, then the short
        arrays)."""
        bitmaps: list[int] = []
        arrays: list[array[int]] = []
        for each in held:
            if isinstance(each, int):
                bitmaps.append(each)
            else:
                arrays.append(each)
        slots = held_by(bitmaps, arrays, needed)
        ids, words = self.ids, self.words
        for slot in slots:
            listed = words[slot]
            out.append((ids[slot], listed, len(mine.intersection(listed))))

    def __len__(self) -> int:
        return len(self.ids) - len(self.free)


GC_DENSE_SHARE = DENSE_SHARE  # GC's classes (domain.similar_pairs)
# GC's classes (and the dedup lookup's, store.lookup) each hold the sizes within this
# ratio (a band): a lookup counts a few longer bitmaps, not one per size (at 100,000
# memories 1.2 times faster looking from every entry, 1.7 times from a few; the dedup
# lookup's candidates 1.6 times faster)
GC_BAND = 1.3


class SizeClasses:
    """Every indexed entry's distinct keywords, in the class of its type and size band.

    With `band` 1 a class holds one set size; above, the sizes m with the same
    ⌊log m / log band⌋: a lookup counts each band once, with the fewest shared words any
    of its sizes needs, and keeps the entries that reach the floor at their own size."""

    def __init__(self, dense_share: int = DENSE_SHARE, band: float = 1.0) -> None:
        self.dense_share = dense_share
        self.band = band
        self._classes: dict[tuple[str, int], int] = {}  # (type, set size) -> class number
        self._homes: list[tuple[str, SizeClass]] = []  # the classes (and their type) by number
        # by type: word -> set size -> the word's postings in that class (SizeClass)
        self._by_word: dict[str, dict[str, dict[int, Slots]]] = {}
        # id -> its class's number << SLOT_BITS | its slot: one int, where a tuple of the two
        # took 64 bytes more an entry
        self._placed: dict[str, int] = {}

    def __contains__(self, entry_id: object) -> bool:
        return entry_id in self._placed

    def add(self, entry_id: str, kind: str, words: tuple[str, ...]) -> None:
        """Index `words` (distinct) of `entry_id`, which is not indexed."""
        key = (kind, band_of(len(words), self.band))
        number = self._classes.get(key)
        if number is None:
            number = self._classes[key] = len(self._homes)
            by_word = self._by_word.setdefault(kind, {})
            self._homes.append((kind, SizeClass(self.dense_share, key[1], by_word)))
        self._placed[entry_id] = number << SLOT_BITS | self._homes[number][1].add(entry_id, words)

    def discard(self, entry_id: str) -> tuple[str, tuple[str, ...]] | None:
        """Forget `entry_id`: the type and words it was indexed with (None if it was not)."""
        placed = self._placed.pop(entry_id, None)
        if placed is None:
            return None
        kind, home = self._homes[placed >> SLOT_BITS]
        slot = placed & SLOT_MASK
        words = home.words[slot]
        home.remove(slot)
        return kind, words

    def passing(
        self, mine: frozenset[str], kind: str, floor: float, no_larger: bool = False
    ) -> Passing:
        """(id, distinct words, words shared) of every indexed entry of type `kind` whose
        plain Jaccard with `mine` reaches `floor` (within SLACK); with `no_larger`, only
        those with no more words than `mine`."""
        out: Passing = []
        by_word = self._by_word.get(kind)
        if by_word is None:
            return out
        spread = [p for p in map(by_word.get, mine) if p is not None]  # each word's postings
        classes, homes = self._classes, self._homes
        if self.band == 1.0:
            for m, needed in needed_shared(len(mine), floor, no_larger):
                if len(spread) < needed:
                    break  # `needed` grows with m
                held = [h for p in spread if (h := p.get(m)) is not None]
                if len(held) >= needed:
                    homes[classes[(kind, m)]][1].sharing(mine, held, needed, out)
            return out
        found: Passing = []
        for band, needed, sizes in banded(len(mine), floor, no_larger, self.band):
            if len(spread) < needed:
                break  # `needed` grows with the band
            held = [h for p in spread if (h := p.get(band)) is not None]
            if len(held) < needed:
                continue
            homes[classes[(kind, band)]][1].sharing(mine, held, needed, found)
            for item in found:  # each at its own size's bound
                if item[2] >= sizes.get(len(item[1]), len(mine) + 1):
                    out.append(item)
            found.clear()
        return out


@functools.lru_cache(maxsize=256)
def band_of(m: int, band: float) -> int:
    """The band of set size `m`: m itself with `band` 1, else ⌊log m / log band⌋."""
    return m if band == 1.0 or m < 1 else int(math.log(m) / math.log(band))


@functools.lru_cache(maxsize=1024)
def banded(
    n: int, floor: float, no_larger: bool, band: float
) -> tuple[tuple[int, int, dict[int, int]], ...]:
    """`needed_shared` by band: (band, the fewest shared words of its sizes, each of its
    sizes that can reach `floor` and the shared words that size needs)."""
    grouped: dict[int, dict[int, int]] = {}
    for m, needed in needed_shared(n, floor, no_larger):
        grouped.setdefault(band_of(m, band), {})[m] = needed
    return tuple((b, min(sizes.values()), sizes) for b, sizes in grouped.items())


@functools.lru_cache(maxsize=1024)
def needed_shared(n: int, floor: float, no_larger: bool) -> tuple[tuple[int, int], ...]:
    """For a set of `n` distinct words: (m, s) for each size m of another set (at most n
    with `no_larger`) that can reach plain Jaccard `floor` (within SLACK), s the fewest
    shared words that do (s / (n + m − s) grows with s): m within [floor·n, n/floor]."""
    out = []
    largest = n if no_larger else int(n / floor + SLACK) + 1
    for m in range(1, largest + 1):
        for s in range(1, min(n, m) + 1):
            if s / (n + m - s) >= floor - SLACK:
                out.append((m, s))
                break
    return tuple(out)
