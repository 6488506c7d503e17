"""An incremental BM25 index: add, remove and update documents without a rebuild.

Postings are grouped by impact: `term → {(tf, document length) → [doc ids]}` (lists: a
quarter of a dict's memory; a removal scans one group; one key tuple shared by every term
with that group). A term adds the same amount to every document of one group, so scoring
computes it once per group and then only adds it up (in `top_k`, a large group's documents
not met yet are inserted in C, only those met before summed one by one). Document
frequencies, lengths and the total length (for avgdl) are kept up to date on every change;
add and remove touch one group per term.

`scores()` is the exact path: every document sharing a term with the query. `top_k()`
finds the k best without scoring every match (MaxScore, term at a time). A term's upper
bound is its best group's contribution (computed at query time from the live statistics, so
nothing has to be maintained for it). Terms are taken from the largest bound down, their
groups walked in full; before each term, the exact scores of the best k partial documents
give a threshold, and once the bounds of the terms still to come add up to less than it, no
document outside those already met can enter the top k. The remaining (common, low-IDF)
terms are then only looked up, in each candidate's own term counts, for the candidates that
can still reach the k-th score: a document at a time, the largest partial first, a term
only while the sum so far plus what the terms left can add reaches the k-th sum found, and
no further than the first candidate whose bound does not (at 100,000 memories a few hundred
of the thousands that could reach the threshold). A speaker's name found in 40 % of the
memories thus costs a few lookups rather than a walk over its posting list. A term held by
at least 1 in 20 documents (and 1,000) can keep its contributions by document until the next
write (two postings per document at most; built only for lookups of a quarter of its
documents or more), so those lookups are one dict hit each.

IDF is the non-negative Lucene form, log(1 + (N − df + 0.5) / (df + 0.5)).
"""

from __future__ import annotations

import bisect
import heapq
import math
import sys
from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from itertools import chain, repeat
from operator import itemgetter

_SLACK = 1e-9  # bounds are compared with a little room for float rounding
_second = itemgetter(1)
_SMALL_GROUP = 16  # a group with fewer documents is added up one by one (see top_k)
_POOL_CHUNK = 32  # the pool's best partials summed first, at least (see _best_of_pool)
_POOL_MAP_SHARE = 8  # see _best_of_pool
_CACHED_TERMS = 4096  # terms whose group contributions are kept between writes
_BY_DOC_MIN_DF = 1000  # a term held by this many documents ...
_BY_DOC_MIN_SHARE = 20  # ... and by at least 1 in this many has its contributions by document
_BY_DOC_POSTINGS = 2  # postings per document kept that way, at most
_BY_DOC_LOOKUPS = 4  # ... and built for lookups of at least 1 in this many of them


@dataclass(frozen=True)
class Bm25Params:
    """k1 saturates term frequency; b sets how much long documents are penalised."""

    k1: float = 1.2
    b: float = 0.75


@dataclass
class TopK:
    """The outcome of `Bm25Index.top_k`.

    `scores` holds the exact BM25 of the k best documents (fewer when fewer match).
    `complete` is True when `scores` holds every matching document not excluded, i.e. the
    pruned search lost nothing. `lower` maps documents met during the search to a lower
    bound of their BM25 (the sum of the groups they were met in).
    """

    scores: dict[str, float]
    complete: bool
    lower: dict[str, float] = field(default_factory=dict)
    # exact BM25 of every document the search scored (a superset of `scores`), and the
    # terms it walked in full: a document not in `lower` holds none of them
    known: dict[str, float] = field(default_factory=dict)
    walked: frozenset[str] = frozenset()

    def count_at_least(self, threshold: float, exclude: Collection[str] = ()) -> int:
        """How many matching documents outside `scores` and `exclude` are known to score at
        least `threshold`: a lower bound on the true number (exact when `complete`)."""
        if self.complete:
            return 0
        lower = self.lower
        found = len([v for v in lower.values() if v >= threshold])  # 3× sum(map(__le__))
        if not found:
            return 0
        known = set(self.scores).union(exclude)
        inside = sum(1 for doc_id in known if lower.get(doc_id, -1.0) >= threshold)
        return found - inside


class Bm25Index:
    """Documents are lists of terms keyed by an id; re-adding an id replaces it."""

    def __init__(self, params: Bm25Params | None = None) -> None:
        self.params = params or Bm25Params()
        self._groups: dict[str, dict[tuple[int, int], list[str]]] = {}
        self._df: dict[str, int] = {}
        # each document's terms in its order, repeats kept (tf = count, the length is the
        # tuple's), each term one string however many documents hold it: a tuple is a
        # third of a Counter's memory, and one copy of each term string a fraction of one
        # per document
        self._doc_terms: dict[str, tuple[str, ...]] = {}
        self._total_len = 0
        self._keys: dict[tuple[int, int], tuple[int, int]] = {}  # see _key
        # each term's groups by contribution, valid until the next add or remove (the
        # contributions depend on N, df and avgdl): queries between writes share them
        self._impact_cache: dict[str, list[tuple[float, tuple[int, int], list[str]]]] = {}
        self._value_cache: dict[str, dict[tuple[int, int], float]] = {}
        self._doc_cache: dict[str, dict[str, float]] = {}  # see _by_doc
        self._doc_cached = 0  # postings held by _doc_cache

    def __len__(self) -> int:
        return len(self._doc_terms)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._doc_terms

    @property
    def avgdl(self) -> float:
        return self._total_len / len(self._doc_terms) if self._doc_terms else 0.0

    def doc_len(self, doc_id: str) -> int:
        return len(self._doc_terms.get(doc_id, ()))

    def df(self, term: str) -> int:
        return self._df.get(term, 0)

    def add(self, doc_id: str, terms: Iterable[str]) -> None:
        """Index `terms` under `doc_id`, replacing what was there (so add is also update)."""
        if doc_id in self._doc_terms:
            self.remove(doc_id)
        self._impact_cache.clear()
        self._value_cache.clear()
        self._doc_cache.clear()
        self._doc_cached = 0
        listed = tuple(map(sys.intern, terms))
        counts = Counter(listed)
        length = len(listed)
        self._doc_terms[doc_id] = listed
        self._total_len += length
        groups, df = self._groups, self._df
        for term, tf in counts.items():
            by_key = groups.get(term)
            if by_key is None:
                groups[term] = {self._key(tf, length): [doc_id]}
                df[term] = 1
                continue
            bucket = by_key.get((tf, length))
            if bucket is None:
                by_key[self._key(tf, length)] = [doc_id]
            else:
                bucket.append(doc_id)
            df[term] += 1

    def _key(self, tf: int, length: int) -> tuple[int, int]:
        """The group key (tf, length), one tuple for every term that has the group: a few
        hundred distinct keys serve tens of thousands of groups."""
        key = (tf, length)
        return self._keys.setdefault(key, key)

    def update(self, doc_id: str, terms: Iterable[str]) -> None:
        self.add(doc_id, terms)

    def remove(self, doc_id: str) -> bool:
        """Forget `doc_id`; False when it was not indexed."""
        listed = self._doc_terms.pop(doc_id, None)
        if listed is None:
            return False
        counts = Counter(listed)
        self._impact_cache.clear()
        self._value_cache.clear()
        self._doc_cache.clear()
        self._doc_cached = 0
        length = len(listed)
        self._total_len -= length
        groups, df = self._groups, self._df
        for term, tf in counts.items():
            by_key = groups[term]
            bucket = by_key[(tf, length)]
            bucket.remove(doc_id)
            if not bucket:
                del by_key[(tf, length)]
            df[term] -= 1
            if not df[term]:
                del groups[term], df[term]
        return True

    def idf(self, term: str) -> float:
        df = self.df(term)
        if df == 0:
            return 0.0
        n = len(self._doc_terms)
        return math.log(1.0 + (n - df + 0.5) / (df + 0.5))

    def _impacts(self, term: str) -> list[tuple[float, tuple[int, int], list[str]]]:
        """(contribution, key, documents) of each group of `term`, largest first (cached
        until the next change; callers do not modify the list)."""
        cached = self._impact_cache.get(term)
        if cached is not None:
            return cached
        idf = self.idf(term)
        k1, b = self.params.k1, self.params.b
        avgdl = self.avgdl or 1.0
        out = []
        for key, docs in self._groups[term].items():
            tf, length = key
            norm = k1 * (1.0 - b + b * length / avgdl)
            out.append((idf * tf * (k1 + 1.0) / (tf + norm), key, docs))
        out.sort(key=lambda group: -group[0])
        if len(self._impact_cache) >= _CACHED_TERMS:
            self._impact_cache.clear()
        self._impact_cache[term] = out
        return out

    def upper_bound(self, term: str) -> float:
        """The most `term` adds to any document (its best group's contribution)."""
        if term not in self._groups:
            return 0.0
        return self._impacts(term)[0][0]

    def term_scores(self, term: str) -> dict[str, float]:
        """The BM25 contribution of one term to every document that holds it."""
        if term not in self._groups:
            return {}
        return {doc_id: value for value, _, docs in self._impacts(term) for doc_id in docs}

    def scores(self, query_terms: Iterable[str]) -> dict[str, float]:
        """BM25 of every document sharing a term with the query (each distinct term once):
        the exact path, whose cost grows with the number of matches."""
        total: dict[str, float] = {}
        k1, b = self.params.k1, self.params.b
        avgdl = self.avgdl or 1.0
        get = total.get
        for term in dict.fromkeys(query_terms):
            by_key = self._groups.get(term)
            if not by_key:
                continue
            idf = self.idf(term)
            for (tf, length), docs in by_key.items():
                norm = k1 * (1.0 - b + b * length / avgdl)
                value = idf * tf * (k1 + 1.0) / (tf + norm)
                for doc_id in docs:
                    total[doc_id] = get(doc_id, 0.0) + value
        return total

    def score_docs(
        self,
        query_terms: Iterable[str],
        doc_ids: Iterable[str],
        found: TopK | None = None,
    ) -> dict[str, float]:
        """Exact BM25 of the given documents (those sharing no term with the query are left
        out), summed in query-term order like `scores()`, so the values are identical.

        With `found` (a `top_k` result for the same query and index state), its exact scores
        are reused and a document it never met is looked up only under the terms it did not
        walk in full (it holds none of those it did)."""
        weighted = self._weighted(query_terms)
        if not weighted:
            return {}
        if found is None:
            return self._exact(weighted, doc_ids, {})
        known, met, doc_terms = found.known, found.lower, self._doc_terms
        out: dict[str, float] = {}
        again: list[str] = []  # met, not scored: scored now
        unmet: dict[str, float] = {}
        # one pass over the documents asked for: a set operation with `met` (the search's
        # partial sums, tens of thousands at 100,000 memories) would walk all of it
        for doc_id in doc_ids:
            value = known.get(doc_id)
            if value is not None:
                out[doc_id] = value
            elif doc_id in met:
                again.append(doc_id)
            elif doc_id in doc_terms:  # documents not indexed match nothing
                unmet[doc_id] = 0.0
        self._exact(weighted, dict.fromkeys(again), out)
        rest = [t for t, _ in weighted if t not in found.walked]
        if rest and unmet:
            # a document never met holds none of the walked terms: its score is the sum, in
            # query order, of its groups' contributions under the other terms
            self._add_groups(rest, unmet)
            out.update((d, v) for d, v in unmet.items() if v)
        return out

    def _add_groups(
        self,
        terms: list[str],
        totals: dict[str, float],
        maps: dict[str, dict[str, float]] | None = None,
    ) -> None:
        """Add, term by term in the given order, each term's group contribution to the
        documents of `totals` that hold it: by intersecting its groups with `totals` (in C)
        when it has few groups and postings for so many documents, else by looking each
        document's group up, or in `maps` (a term's contributions by document, given by
        the caller). Each document sits in one group per term, so the sums are the same
        floats either way."""
        doc_terms = self._doc_terms
        for term in terms:
            by_doc = maps.get(term) if maps else None
            if by_doc is None:
                by_doc = self._by_doc(term, len(totals))
            if by_doc is not None:
                get = by_doc.get
                for doc_id in totals:
                    value = get(doc_id)
                    if value is not None:
                        totals[doc_id] += value
                continue
            impacts = self._impacts(term)
            # an intersection costs about a lookup per group and an eighth of one per posting
            if len(impacts) * 8 + self._df[term] // 4 <= len(totals):
                for value, _, docs in impacts:
                    for doc_id in totals.keys() & docs:
                        totals[doc_id] += value
                continue
            by_key = self._values(term)
            for doc_id in totals:
                listed = doc_terms[doc_id]
                tf = listed.count(term)
                if tf:
                    totals[doc_id] += by_key[(tf, len(listed))]

    def _by_doc(self, term: str, lookups: int) -> dict[str, float] | None:
        """A common term's contribution by document, cached like `_impacts`: summing it for
        a few hundred candidates is then one lookup each, not a walk over tens of thousands
        of postings. None for a rarer term (walking its groups is as cheap), and, when it
        is not cached, for fewer `lookups` than a `_BY_DOC_LOOKUPS`-th of its documents
        (counting the term in each document's terms costs less than building the map).
        At most two postings per document are kept this way."""
        cached = self._doc_cache.get(term)
        if cached is not None:
            return cached
        df = self._df[term]
        if df < _BY_DOC_MIN_DF or df * _BY_DOC_MIN_SHARE < len(self._doc_terms):
            return None
        if lookups * _BY_DOC_LOOKUPS < df:
            return None
        if self._doc_cached + df > _BY_DOC_POSTINGS * len(self._doc_terms):
            self._doc_cache.clear()
            self._doc_cached = 0
        cached = {doc_id: value for value, _, docs in self._impacts(term) for doc_id in docs}
        self._doc_cache[term] = cached
        self._doc_cached += df
        return cached

    def _doc_map(self, term: str) -> dict[str, float]:
        """`term`'s contribution by document, built now (in C, a group at a time)."""
        by_doc: dict[str, float] = {}
        for value, _, docs in self._impacts(term):
            by_doc.update(zip(docs, repeat(value)))
        return by_doc

    def _values(self, term: str) -> dict[tuple[int, int], float]:
        """Each group's contribution by its (tf, length) key, cached like `_impacts`."""
        cached = self._value_cache.get(term)
        if cached is None:
            cached = {key: value for value, key, _ in self._impacts(term)}
            if len(self._value_cache) >= _CACHED_TERMS:
                self._value_cache.clear()
            self._value_cache[term] = cached
        return cached

    def _weighted(self, query_terms: Iterable[str]) -> list[tuple[str, float]]:
        groups = self._groups
        return [(t, self.idf(t)) for t in dict.fromkeys(query_terms) if t in groups]

    def _exact(
        self, weighted: list[tuple[str, float]], doc_ids: Iterable[str], out: dict[str, float]
    ) -> dict[str, float]:
        """Add the exact BM25 (over `weighted`, in order) of the matching `doc_ids` to `out`."""
        k1, b = self.params.k1, self.params.b
        k1p = k1 + 1.0
        avgdl = self.avgdl or 1.0
        doc_terms = self._doc_terms
        for doc_id in doc_ids:
            counts = doc_terms.get(doc_id)
            if counts is None:
                continue
            norm = k1 * (1.0 - b + b * len(counts) / avgdl)
            total = 0.0
            hit = False
            for term, idf in weighted:
                tf = counts.count(term)
                if tf:
                    total += idf * tf * k1p / (tf + norm)
                    hit = True
            if hit:
                out[doc_id] = total
        return out

    def _best_of_pool(
        self,
        pool: list[str],
        acc: dict[str, float],
        terms: list[tuple[str, float]],
        k: int,
    ) -> list[str]:
        """The k of `pool` (more than k documents) that summing `terms` (with the most each
        can add, (1 + slack) × its bound) into their partials (`acc`) ranks first, ties by
        id, once the walk stopped: what summing the whole pool and taking its k best gives.

        MaxScore, a document at a time: from the largest partials down, until the next
        one's bound (partial + all the terms' most) is below the k-th sum found less twice
        the slack the cut allows; and a term is looked up only for the documents whose sum
        so far plus the most of the terms left can still reach that. What is left out can
        be neither among the k nor near the cut (a bound is never below the sum, rounding
        aside, which the slack covers)."""
        ranked = sorted(pool, key=acc.__getitem__, reverse=True)
        most = [0.0] * (len(terms) + 1)  # most[j]: what terms j.. can add at most
        for j in range(len(terms) - 1, -1, -1):
            most[j] = most[j + 1] + terms[j][1]
        # a term's contributions by document, built for this call once its lookups come
        # to a `_POOL_MAP_SHARE`-th of its postings (one lookup costs about as much as
        # that many postings put in a map)
        maps: dict[str, dict[str, float]] = {}
        looked = dict.fromkeys([t for t, _ in terms], 0)
        sums: dict[str, float] = {}
        done, end = 0, min(len(ranked), max(2 * k, _POOL_CHUNK))  # more than k: a first cut
        cut = bar = -math.inf
        top: list[float] = []  # the k largest sums so far, largest first
        while done < end:
            chunk = {d: acc[d] for d in ranked[done:end]}
            for j, (term, _) in enumerate(terms):
                if j and bar > -math.inf:
                    floor = bar - most[j]
                    chunk = {d: v for d, v in chunk.items() if v >= floor}
                if term not in maps:
                    looked[term] += len(chunk)
                    df = self._df[term]
                    if looked[term] * _POOL_MAP_SHARE >= df and term not in self._doc_cache:
                        maps[term] = self._doc_map(term)
                self._add_groups([term], chunk, maps)
            sums.update(chunk)
            done = end
            # the k largest of all the sums are the k largest of those before and the chunk's
            top = heapq.nlargest(k, chain(top, chunk.values()))
            cut = top[-1]
            bar = cut * (1.0 - 2 * _SLACK)
            # the next documents whose bound reaches the bar, twice as many at most
            reach = bisect.bisect_left(ranked, -bar, lo=done, key=lambda d: -(acc[d] + most[0]))
            end = min(reach, 2 * done)
        return _best_above(sums, cut, k)

    def top_k(self, query_terms: Iterable[str], k: int, exclude: Collection[str] = ()) -> TopK:
        """The `k` best documents not in `exclude`, by exact BM25 (ties by id), found without
        scoring every match (see the module doc). Equal to the first `k` of `scores()` in
        (−score, id) order, up to float rounding between near-equal scores."""
        wanted = list(dict.fromkeys(query_terms))
        present = [t for t in wanted if t in self._groups]
        if k <= 0 or not present:
            return TopK({}, complete=not present)
        weighted = self._weighted(present)
        impacts = {t: self._impacts(t) for t in present}
        # the most promising term first; among equal bounds the rarer
        plan = sorted(present, key=lambda t: (-impacts[t][0][0], self.df(t), t))
        rest = [0.0] * (len(plan) + 1)  # rest[i]: the most terms i.. can still add
        for i in range(len(plan) - 1, -1, -1):
            rest[i] = rest[i + 1] + impacts[plan[i]][0][0] * (1.0 + _SLACK)
        depth = k + len(exclude)  # the depth-th best score bounds the k-th kept one below
        acc: dict[str, float] = {}
        known: dict[str, float] = {}  # exact scores, computed once per document
        get = acc.get
        theta = 0.0
        essential = len(plan)
        best: list[tuple[str, float]] = []
        for i, term in enumerate(plan):
            if len(acc) >= depth:
                # exact scores of the best depth partials: their lowest bounds the k-th
                best = _best_partials(acc, depth, impacts[plan[i - 1]], best)
                self._exact(weighted, [d for d, _ in best if d not in known], known)
                theta = max(theta, min(known[d] for d, _ in best))
                if rest[i] < theta:  # a document met by none of terms ..i cannot get in
                    essential = i
                    break
            for value, _, docs in impacts[term]:
                if len(docs) < _SMALL_GROUP:
                    for doc_id in docs:
                        acc[doc_id] = get(doc_id, 0.0) + value
                    continue
                # the documents met before get the sum, the others the value itself (0.0 +
                # value, the same float), the latter inserted in C
                met = {d: acc[d] + value for d in acc.keys() & docs}
                acc.update(zip(docs, repeat(value)))
                acc.update(met)
        stopped = essential < len(plan)
        if stopped:
            # the other terms only for the candidates that can still reach theta
            remaining = rest[essential]
            # a partial below `low` cannot reach theta, whatever the rounding: the sum is
            # computed only for the few that pass the plain comparison
            low = theta - remaining - _SLACK * (theta + remaining)
            kept = [d for d, p in acc.items() if p >= low and p + remaining >= theta]
            if exclude:
                kept = [d for d in kept if d not in exclude]
            if len(kept) > k:
                bounds = [(t, impacts[t][0][0] * (1.0 + _SLACK)) for t in plan[essential:]]
                chosen = self._best_of_pool(kept, acc, bounds, k)
            else:
                chosen = kept
            pool_size = len(kept)
        else:
            pool = {d: s for d, s in acc.items() if d not in exclude} if exclude else acc
            if len(pool) > k:
                chosen = _best_above(pool, heapq.nlargest(k, pool.values())[-1], k)
            else:
                chosen = list(pool)
            pool_size = len(pool)
        self._exact(weighted, [d for d in chosen if d not in known], known)
        exact = {d: known[d] for d in chosen}
        return TopK(
            exact,
            complete=not stopped and pool_size <= k,
            lower=acc,
            known=known,
            walked=frozenset(plan[:essential]),
        )


def _best_above(sums: dict[str, float], cut: float, k: int) -> list[str]:
    """The `k` best of `sums`, ties by id, given `cut`, the k-th largest sum: those within
    the slack of it are ranked, for rounding not to decide a tie."""
    bar = cut * (1.0 - _SLACK)
    near = [(d, s) for d, s in sums.items() if s >= bar]
    near.sort(key=lambda item: (-item[1], item[0]))
    return [d for d, _ in near[:k]]


def _best_partials(
    acc: dict[str, float],
    depth: int,
    last: list[tuple[float, tuple[int, int], list[str]]],
    previous: list[tuple[str, float]],
) -> list[tuple[str, float]]:
    """The `depth` largest partial sums of `acc`, ties in `acc`'s order: what
    `heapq.nlargest(depth, acc.items(), key=_second)` gives, from the partials at or above
    a lower bound of the depth-th (those below cannot be among them). Two bounds, the
    larger kept: the documents of the last walked term's best groups (`last`) hold at
    least their group's contribution, and the best ones before (`previous`) at least
    their present sums."""
    floor = 0.0
    count = 0
    for value, _, docs in last:
        count += len(docs)
        if count >= depth:
            floor = value
            break
    if previous:
        floor = max(floor, min(acc[d] for d, _ in previous))
    if floor <= 0.0:
        return heapq.nlargest(depth, acc.items(), key=_second)
    return heapq.nlargest(depth, [(d, v) for d, v in acc.items() if v >= floor], key=_second)
