"""Finding near-duplicates without chaining.

A group is merged only if every pair in it passes the threshold: A~B and B~C with A≁C is two
memories, not one (servers that merged transitively built "mega-memories"). Candidates come
from an inverted index over each entry's rarest keywords (a prefix filter), so the cost
follows real overlaps, not n², and a word shared by every entry costs nothing.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from mnemod.domain.model import Entry


@dataclass(frozen=True)
class Candidate:
    a: str
    b: str
    score: float


def prefix_length(size: int, threshold: float) -> int:
    """How many of a set's words (in one global order) must be looked up to find every set
    with Jaccard ≥ threshold: such a set shares at least ⌈t·|A|⌉ words with A, so it holds
    one of A's first |A| − ⌈t·|A|⌉ + 1 (the prefix filter of all-pairs similarity joins)."""
    return size - math.ceil(threshold * size - 1e-9) + 1


def rare_first(words: Iterable[str], frequency: Callable[[str], int]) -> list[str]:
    """Distinct words, rarest first: common words land at the end, outside the prefix."""
    return sorted(set(words), key=lambda w: (frequency(w), w))


def candidate_pairs(entries: Iterable[Entry], threshold: float) -> list[Candidate]:
    """Pairs of the same type whose keyword Jaccard ≥ threshold, best first. Only words in
    each entry's prefix are indexed, so a word every entry shares costs nothing."""
    listed = list(entries)
    frequency: Counter[tuple[str, str]] = Counter(
        (e.type, w) for e in listed for w in set(e.keywords)
    )
    postings: dict[tuple[str, str], list[Entry]] = defaultdict(list)
    for entry in listed:

        def count(word: str, type_: str = entry.type) -> int:
            return frequency[(type_, word)]

        ordered = rare_first(entry.keywords, count)
        for word in ordered[: prefix_length(len(ordered), threshold)]:
            postings[(entry.type, word)].append(entry)
    sets = {e.id: frozenset(e.keywords) for e in listed}
    seen: set[tuple[str, str]] = set()
    found: list[Candidate] = []
    for group in postings.values():
        for i, left in enumerate(group):
            for right in group[i + 1 :]:
                pair = (left.id, right.id) if left.id < right.id else (right.id, left.id)
                if pair in seen:
                    continue
                seen.add(pair)
                a, b = sets[left.id], sets[right.id]
                shared = len(a & b)
                union = len(a) + len(b) - shared
                score = shared / union if union else 0.0
                if score >= threshold:
                    found.append(Candidate(pair[0], pair[1], score))
    found.sort(key=lambda c: (-c.score, c.a, c.b))
    return found


def merge_groups(entries: list[Entry], threshold: float) -> list[list[Entry]]:
    """Groups (oldest first) in which every pair passes the threshold; no chaining."""
    by_id = {e.id: e for e in entries}
    similar: dict[str, dict[str, float]] = defaultdict(dict)
    for pair in candidate_pairs(entries, threshold):
        similar[pair.a][pair.b] = pair.score
        similar[pair.b][pair.a] = pair.score
    grouped: set[str] = set()
    groups: list[list[Entry]] = []
    for entry in sorted(entries, key=lambda e: (e.created_at, e.id)):
        if entry.id in grouped or entry.id not in similar:
            continue
        group = [entry]
        for other_id, _score in sorted(similar[entry.id].items(), key=lambda kv: (-kv[1], kv[0])):
            if other_id in grouped:
                continue
            if all(other_id in similar[member.id] for member in group[1:]):
                group.append(by_id[other_id])
        if len(group) > 1:
            grouped.update(member.id for member in group)
            groups.append(group)
    return groups
