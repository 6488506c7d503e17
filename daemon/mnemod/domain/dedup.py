"""Finding near-duplicates without chaining.

A group is merged only if every pair in it passes the threshold: A~B and B~C with A≁C is two
memories, not one (servers that merged transitively built "mega-memories"). Candidates come
from an inverted index over keywords, so the cost follows overlaps, not n².
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from mnemod.domain.keywords import jaccard
from mnemod.domain.model import Entry


@dataclass(frozen=True)
class Candidate:
    a: str
    b: str
    score: float


def candidate_pairs(entries: Iterable[Entry], threshold: float) -> list[Candidate]:
    """Pairs of the same type whose keyword Jaccard ≥ threshold, best first."""
    by_id: dict[str, Entry] = {}
    postings: dict[tuple[str, str], list[str]] = defaultdict(list)
    for entry in entries:
        by_id[entry.id] = entry
        for word in set(entry.keywords):
            postings[(entry.type, word)].append(entry.id)
    seen: set[tuple[str, str]] = set()
    found: list[Candidate] = []
    for ids in postings.values():
        for i, left in enumerate(ids):
            for right in ids[i + 1 :]:
                pair = (left, right) if left < right else (right, left)
                if pair in seen:
                    continue
                seen.add(pair)
                score = jaccard(by_id[pair[0]].keywords, by_id[pair[1]].keywords)
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
