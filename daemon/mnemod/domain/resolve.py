"""Resolve: the token-budgeted context for a prompt (docs/design.md §4). Pure: `now` is passed in.

Selection order:
1. hot — L1 items without triggers and entries with tier=hot (`once` items once per session),
   in priority order; when they alone exceed the budget they are trimmed and
   `hot_overflow` is set;
2. warm — items whose trigger (a google-re2 regex, linear time, case-insensitive) matches
   the prompt; a pattern that does not compile is skipped, never fatal;
3. cold — everything else that matches the prompt, scored by BM25 with mild importance and
   frecency priors and the prompt's time and person cues (see `ranking`, `time_cues`,
   `person_cues`; a prompt's word that no memory holds counts through its kin, see
   `word_kin`), packed greedily in score order (skipping what does not fit; score per
   token is a setting, and measured worse).

Only a bounded pool is ranked: the BM25 top-k of the cold items (k = `pool_size(budget)`,
at least `pool_floor`, more for large budgets), found by `Bm25Index.top_k` without scoring
every match, plus those hits' neighbours; boosts and priors apply to that pool. When the
pool runs out before the budget does (another line of the usual length would still fit),
it is widened (×4) and the packing redone, unless nothing outside it can reach the
relevance floor (`_beyond_floor`). With fewer matches than k the pool is every
match and the ranking is the exact one. On LoCoMo the pool's recall is at or above the
exact path's at every budget measured (200 to 2,000 tokens, by up to 0.009 at 1,000:
59-95 % of the selections are identical, the rest differ in the tail, where the exact
path also gives the answer bonus of weak matches that end with a question). k = 25 at
1,000 tokens resolves 10,000 entries about 25 % faster than k = 30 (recall at 1,000 tokens
0.847 against 0.850 through the public API), and more than twice as fast as k = 100.

`dropped` counts the matching items left out: the hot, warm and pooled cold candidates
(above the relevance floor) that did not fit, plus the documents outside the pool whose
partial BM25 from the top-k search already reaches the floor. When the search was pruned
(`dropped_exact` False) this is a lower bound: documents it never looked at are not counted.

The whole text (heading, lines, date headers, the left-out note) is counted with the real
tokenizer and never exceeds the budget. The caller records accesses of the returned items
and the `once_ids` of the session.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

import re2

from mnemod.domain.bm25 import Bm25Index, Bm25Params, TopK
from mnemod.domain.candidates import (
    Candidate,
)
from mnemod.domain.framing import FrameCosts, Tally, render, total_tokens
from mnemod.domain.person_cues import persons, speaker
from mnemod.domain.ranking import (
    RankingSettings,
    analyze,
    asks,
    frecency_boost,
    pack_key,
    query_terms,
    with_neighbours,
)
from mnemod.domain.time_cues import asks_when, date_spans, tells_when
from mnemod.domain.word_kin import kin
from mnemod.tokens import TokenCounter

_LAYER_RANK = {"l1": 0, "l2": 1, "l3": 2}


@dataclass(frozen=True)
class ResolveResult:
    text: str
    items: list[Candidate]
    tokens_used: int
    tiers_used: tuple[str, ...]
    dropped: int
    hot_overflow: bool = False
    trace: list[dict[str, Any]] = field(default_factory=list)
    once_ids: tuple[str, ...] = ()
    dropped_exact: bool = True  # False: `dropped` is a lower bound (see Resolver.resolve)


@dataclass
class _Pick:
    candidate: Candidate
    phase: str  # "hot" | "warm" | "cold"
    bm25: float = 0.0
    score: float = 0.0
    cost: int = 0
    matched: bool = True
    reason: str = ""


class Resolver:
    """Owns the candidates and their BM25 index; `upsert`/`remove` keep both in step."""

    def __init__(self, counter: TokenCounter, settings: RankingSettings | None = None) -> None:
        self.settings = settings or RankingSettings()
        self.counter = counter
        self.index = Bm25Index(Bm25Params(self.settings.k1, self.settings.b))
        self.costs = FrameCosts(counter)
        self._items: dict[str, Candidate] = {}
        self._hot: set[str] = set()
        self._triggered: set[str] = set()
        self._patterns: dict[str, Any] = {}
        # the L3 ids by (created_at, seq), and their created_at (shared with the candidates)
        self._order: list[str] = []
        self._times: list[datetime] = []
        self._near: dict[str, list[tuple[str, int]]] = {}  # neighbours; cleared when _order changes

    @property
    def has_once_items(self) -> bool:
        """Whether a session can change what resolve selects: some hot item is `once`."""
        items = self._items
        return any(items[i].once for i in self._hot)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, candidate_id: object) -> bool:
        return candidate_id in self._items

    def get(self, candidate_id: str) -> Candidate | None:
        return self._items.get(candidate_id)

    def upsert(self, candidate: Candidate) -> None:
        """Add or replace; the index is touched only when the content changed. The candidate
        kept carries its place among the L3 items created at the same moment and, while the
        content is the same, what was learnt of it (a copy is kept when the given one does
        not)."""
        old = self._items.get(candidate.id)
        fresh = old is None or old.content != candidate.content
        if fresh:
            self.index.add(candidate.id, analyze(candidate.content, self.settings))
        moved = (
            old is None or old.created_at != candidate.created_at or old.layer != candidate.layer
        )
        if moved and old is not None and old.layer == "l3":
            self._order_remove(old)  # while the old candidate still gives its seq
        seq = old.seq if old is not None and not moved else self._next_seq(candidate)
        timed, asking = (None, None) if old is None or fresh else (old.timed, old.asking)
        if candidate.seq != seq or candidate.timed is not timed or candidate.asking is not asking:
            candidate = replace(candidate, seq=seq, timed=timed, asking=asking)
        self._items[candidate.id] = candidate
        (self._hot.add if candidate.hot else self._hot.discard)(candidate.id)
        wants_trigger = bool(candidate.triggers) and not candidate.hot
        (self._triggered.add if wants_trigger else self._triggered.discard)(candidate.id)
        if moved:
            if candidate.layer == "l3":
                self._order_insert(candidate)
            self._near.clear()

    def accessed(self, candidate_id: str, access_count: int, last_accessed_at: datetime) -> bool:
        """Bring an item's access fields up to date; False when it is not here. The
        candidate is replaced only when ranking would see it: its deliberate accesses
        changed, or their last one while there are any. A resolve selects some 30 items and
        records an access on each, nearly all of them never accessed otherwise: rebuilding
        their candidates was most of what recording them cost (0.25 of 0.3 ms a resolve at
        1,000 memories)."""
        old = self._items.get(candidate_id)
        if old is None:
            return False
        if old.access_count != access_count or (
            access_count > 0 and old.last_accessed_at != last_accessed_at
        ):
            self._items[candidate_id] = replace(
                old, access_count=access_count, last_accessed_at=last_accessed_at
            )
        return True

    def remove(self, candidate_id: str) -> bool:
        old = self._items.get(candidate_id)
        if old is None:
            return False
        if old.layer == "l3":
            self._order_remove(old)  # while the candidate still gives its seq
            self._near.clear()
        del self._items[candidate_id]
        self.index.remove(candidate_id)
        self.costs.forget(candidate_id)
        self._hot.discard(candidate_id)
        self._triggered.discard(candidate_id)
        return True

    def _next_seq(self, candidate: Candidate) -> int:
        """The seq that puts an L3 item after those created at the same moment: 0 (a cached
        int, no object a memory) unless some are; an item moved in time or into L3 joins
        its moment last."""
        times = self._times
        if candidate.layer != "l3" or not times or times[-1] < candidate.created_at:
            return 0
        at = bisect.bisect_right(times, candidate.created_at)
        if at and times[at - 1] == candidate.created_at:
            return self._items[self._order[at - 1]].seq + 1
        return 0

    def _seq_of(self, candidate_id: str) -> int:
        return self._items[candidate_id].seq

    def _order_at(self, candidate: Candidate) -> int:
        """The position of `candidate` in `_order` (which holds it)."""
        times, moment = self._times, candidate.created_at
        at = bisect.bisect_left(times, moment)
        end = bisect.bisect_right(times, moment, at)
        if end - at > 1:  # several at that moment: they stand by seq
            at = bisect.bisect_left(self._order, candidate.seq, at, end, key=self._seq_of)
        return at

    def _order_insert(self, candidate: Candidate) -> None:
        """After those created at the same moment (its seq is the highest there)."""
        at = bisect.bisect_right(self._times, candidate.created_at)
        self._order.insert(at, candidate.id)
        self._times.insert(at, candidate.created_at)

    def _order_remove(self, candidate: Candidate) -> None:
        at = self._order_at(candidate)
        if at < len(self._order) and self._order[at] == candidate.id:
            del self._order[at]
            del self._times[at]

    def neighbours(self, candidate_id: str) -> list[tuple[str, int]]:
        """(id, distance) of the L3 items created just before and after this one."""
        cached = self._near.get(candidate_id)
        if cached is not None:
            return cached
        self._near[candidate_id] = out = self._find_neighbours(candidate_id)
        return out

    def _find_neighbours(self, candidate_id: str) -> list[tuple[str, int]]:
        candidate = self._items[candidate_id]
        if candidate.layer != "l3":
            return []
        at = self._order_at(candidate)
        times = self._times
        window = self.settings.neighbour_window_s
        out = []
        for step in (-1, 1):
            for distance in range(1, self.settings.neighbour_span + 1):
                other = at + step * distance
                if not 0 <= other < len(self._order):
                    break
                if abs((times[other] - candidate.created_at).total_seconds()) > window:
                    break
                out.append((self._order[other], step * distance))
        return out

    def _pattern(self, source: str) -> Any:
        if source not in self._patterns:
            options = re2.Options()
            options.log_errors = False
            options.case_sensitive = False
            options.max_mem = 1 << 20
            try:
                self._patterns[source] = re2.compile(source, options)
            except re2.error:
                self._patterns[source] = None
        return self._patterns[source]

    def triggers_match(self, candidate: Candidate, prompt: str) -> bool:
        for source in candidate.triggers:
            pattern = self._pattern(source)
            if pattern is not None and pattern.search(prompt) is not None:
                return True
        return False

    def pool_size(self, budget: int) -> int:
        """How many cold candidates resolve ranks: enough to fill `budget` several times."""
        settings = self.settings
        return max(settings.pool_floor, math.ceil(budget * settings.pool_per_token))

    def resolve(
        self,
        prompt: str,
        budget: int,
        now: datetime,
        seen_once: Set[str] = frozenset(),
        trace: bool = False,
        pool: int | None = None,
    ) -> ResolveResult:
        """Select and frame memories for `prompt` within `budget` tokens (see module doc).

        `pool` overrides `pool_size(budget)`; 0 ranks every match (the exact path, for tests
        and benchmarks). `dropped` in the result is exact unless `dropped_exact` is False,
        when it is the lower bound described in the module doc."""
        words = query_terms(prompt, self.settings)
        hot = sorted(
            (self._items[i] for i in self._hot if i not in seen_once or not self._items[i].once),
            key=_priority,
        )
        warm_found = [
            self._items[i] for i in self._triggered if self.triggers_match(self._items[i], prompt)
        ]
        skip = self._hot | {c.id for c in warm_found}
        fixed = self.index.score_docs(words, skip)  # BM25 of hot and warm items
        warm = sorted(
            warm_found,
            key=lambda c: (-c.importance, -fixed.get(c.id, 0.0), c.created_at, c.id),
        )
        cue, most = self._cues(prompt, now)  # the cues' factors (1 for none)
        extra = self._kin_scores(words, skip)  # what the kin of words in no memory add
        packed: _Packed
        size = self.pool_size(budget) if pool is None else pool
        while True:
            if size > 0:
                found = self.index.top_k(words, size, exclude=skip)
            else:
                found = TopK(
                    {i: s for i, s in self.index.scores(words).items() if i not in skip},
                    complete=True,
                )
            if extra:
                found = self._with_kin(words, found, extra, size)
            ranked, floor = self._cold(words, found, fixed, skip, now, cue, extra)
            beyond = 0
            if not found.complete:
                beyond = found.count_at_least(floor, skip | {row[1] for row in ranked})
            matched = sum(1 for row in ranked if row[4])
            worst = len(hot) + len(warm) + matched + beyond
            packed = self._pack(hot, warm, fixed, ranked, budget, self.costs.note(worst), trace)
            if found.complete or not packed.ran_out or self._beyond_floor(found, floor, most):
                break
            size *= 4  # the pool ran low before the budget did: rank a wider one
        return self._finish(packed, budget, trace, beyond, found.complete)

    def _cues(
        self, prompt: str, now: datetime
    ) -> tuple[Callable[[Candidate], float] | None, float]:
        """A cold candidate's factor from the prompt's cues. Time (domain/time_cues.py): × (1
        + `when_weight`) for a memory that says when, if the prompt asks when; × (1 +
        `date_weight`) for one created in a period the prompt names (or within
        `date_slack_days` after it). Persons (domain/person_cues.py): × (1 +
        `speaker_weight`) for a memory attributed to someone the prompt names, if it asks
        for several things, and × (1 + `event_weight`) more if that memory says when (it
        tells of an event; not when the prompt asks when or names a period, which the time
        cues weigh). None when the prompt has no
        cue; with one, the largest factor the cues give."""
        settings = self.settings
        when = settings.when_weight > 0 and asks_when(prompt)
        spans: list[tuple[datetime, datetime]] = []
        if settings.date_weight > 0:
            slack = timedelta(days=settings.date_slack_days)
            spans = [(start, end + slack) for start, end in date_spans(prompt, now)]
        people = persons(prompt) if settings.speaker_weight > 0 else frozenset()
        if not when and not spans and not people:
            return None, 1.0
        when_factor = 1.0 + settings.when_weight if when else 1.0
        date_factor = 1.0 + settings.date_weight
        person_factor = 1.0 + settings.speaker_weight
        event_factor = 1.0 if when or spans else 1.0 + settings.event_weight
        told = self._tells_when

        def factor(candidate: Candidate) -> float:
            value = when_factor if when and told(candidate) else 1.0
            if spans and any(a <= candidate.created_at < b for a, b in spans):
                value *= date_factor
            if people and speaker(candidate.content) in people:
                value *= person_factor
                if event_factor != 1.0 and told(candidate):
                    value *= event_factor
            return value

        most = when_factor * (date_factor if spans else 1.0)
        if people:
            most *= person_factor * event_factor
        return factor, most

    def _kin_scores(self, words: list[str], skip: Set[str]) -> dict[str, float]:
        """For the prompt's words that no memory holds, what their kin (domain/word_kin.py)
        add to each memory holding one: `kin_weight` × the kin's BM25. Empty (nothing to
        add) when every word is held."""
        weight = self.settings.kin_weight
        if weight <= 0:
            return {}
        index = self.index
        extra: dict[str, float] = {}
        for word in dict.fromkeys(words):
            for term in kin(word, lambda term: index.df(term) > 0):
                for doc_id, value in index.term_scores(term).items():
                    if doc_id not in skip:
                        extra[doc_id] = extra.get(doc_id, 0.0) + weight * value
        return extra

    def _with_kin(self, words: list[str], found: TopK, extra: dict[str, float], size: int) -> TopK:
        """The hits with what the kin add (`_kin_scores`): the BM25 top-k plus the memories
        holding a kin, each scored by its words' BM25 and its kin's part; of a pruned
        search's, the best `size` (a complete one keeps every match, as it holds them)."""
        scores = found.scores
        new = [doc_id for doc_id in extra if doc_id not in scores]
        own = self.index.score_docs(words, new, found) if new and not found.complete else {}
        joined = {doc_id: value + extra.get(doc_id, 0.0) for doc_id, value in scores.items()}
        for doc_id in new:
            joined[doc_id] = own.get(doc_id, 0.0) + extra[doc_id]
        best = sorted(joined.items(), key=lambda row: (-row[1], row[0]))
        if not found.complete:
            best = best[: max(size, len(scores))]
        return replace(found, scores=dict(best))

    def _tells_when(self, candidate: Candidate) -> bool:
        """cues.tells_when of the candidate's content, kept until the content changes."""
        known = candidate.timed
        return (
            candidate.remember("timed", tells_when(candidate.content)) if known is None else known
        )

    def _asks(self, candidate_id: str) -> bool:
        """ranking.asks of the candidate's content, kept until the content changes."""
        candidate = self._items[candidate_id]
        known = candidate.asking
        return candidate.remember("asking", asks(candidate.content)) if known is None else known

    def _beyond_floor(self, found: TopK, floor: float, most: float = 1.0) -> bool:
        """True when nothing outside the pool can reach the relevance floor: such a document
        has at most the k-th BM25, neighbours outside the pool add at most
        `neighbour_weight` (or `answer_weight`, the larger) × that, and the prompt's cues
        multiply it by at most `most` (a wider pool would only rank what packing must
        leave)."""
        kth = min(found.scores.values(), default=0.0)
        settings = self.settings
        bonus = max(settings.neighbour_weight, settings.answer_weight)
        return (1.0 + bonus) * kth * most < floor

    def _cold(
        self,
        words: list[str],
        found: TopK,
        fixed: dict[str, float],
        skip: Set[str],
        now: datetime,
        cue: Callable[[Candidate], float] | None = None,
        extra: Mapping[str, float] | None = None,
    ) -> tuple[list[_Ranked], float]:
        """Cold candidates in packing order, and the relevance floor.

        The hits are the BM25 top-k (`found`, hot and warm items left out); their neighbours
        are scored too, so a neighbour gets its own BM25 plus the bonus, and a hit the bonus
        of its best neighbour. The only bonus not given is the one a neighbour would get
        from a match outside the top k: at most `neighbour_weight` (`answer_weight` after
        a question) × the k-th BM25, which only reorders the tail, far below what fits the
        budget. With every match in `found` (`complete`) this is the exact ranking.

        `cue` (see `_cues`) multiplies each candidate's score. `extra` (see `_kin_scores`) is
        what the kin of the prompt's unheld words add to a memory's BM25; the hits in
        `found` have it already.

        Each row is (packing key, id, score, BM25, matched); the rows sort in packing order
        (the key is the negated score per cost**density_exponent, ties by id).
        """
        settings = self.settings
        hits = found.scores
        bm25 = hits
        relevance = hits
        if settings.neighbour_weight > 0:
            near = {i: self.neighbours(i) for i in hits}
            if not found.complete:  # complete: neighbours outside the hits match nothing
                outside = {o for row in near.values() for o, _ in row if o not in hits}
                bm25 = {**hits, **self.index.score_docs(words, outside - skip, found)}
                if extra:  # the neighbours' kin, as the hits have theirs
                    for doc_id in outside.intersection(extra).difference(skip):
                        bm25[doc_id] = bm25.get(doc_id, 0.0) + extra[doc_id]
            relevance = with_neighbours(bm25, near, settings, self._asks)
        best = max(max(hits.values(), default=0.0), max(fixed.values(), default=0.0))
        floor = settings.min_relative_score * best
        rows: list[_Ranked] = []
        append = rows.append
        items = self._items
        weight = settings.importance_weight
        by_rank = settings.density_exponent == 0  # rank order: the key is the score itself
        for doc_id, value in relevance.items():
            if value < floor or doc_id in skip:
                continue
            c = items[doc_id]
            # value × importance factor × (1 + frecency boost), the boost only when non-zero
            score = value * (1.0 + weight * (c.importance - 3))
            if c.access_count > 0:
                score *= 1.0 + frecency_boost(c.access_count, c.last_accessed_at, now, settings)
            if cue is not None:
                score *= cue(c)
            own = bm25.get(doc_id)
            key = -score if by_rank else -pack_key(score, self.costs.line(c), settings)
            append((key, doc_id, score, 0.0 if own is None else own, own is not None))
        rows.sort()
        return rows, floor

    def _pack(
        self,
        hot: list[Candidate],
        warm: list[Candidate],
        fixed: dict[str, float],
        ranked: list[_Ranked],
        budget: int,
        reserve: int,
        trace: bool,
    ) -> _Packed:
        """Greedy packing: hot, warm, then the ranked cold rows, skipping what does not fit.

        A pick is only built for what is taken (and, for the trace, for everything); what
        is left out is counted."""
        tally = Tally(self.costs, budget, reserve)
        out = _Packed()
        taken = out.taken
        for phase, group in (("hot", hot), ("warm", warm)):
            for c in group:
                value = fixed.get(c.id, 0.0)
                pick = _Pick(c, phase, value, value)
                if tally.fits(c):
                    pick.cost = tally.take(c)
                    pick.reason = "taken"
                    taken.append(pick)
                else:
                    if trace:  # the cost of what was left out is only shown in the trace
                        pick.cost = tally.marginal(c)
                    pick.reason = "left: budget"
                    out.left += 1
                    out.hot_left = out.hot_left or phase == "hot"
                if trace:
                    out.considered.append(pick)
        items = self._items
        line = self.costs.line
        limit = budget - reserve  # what the text may use before the note
        lengths = []  # of the ranked lines, to tell whether the pool ran out (below)
        left = 0
        for _, doc_id, score, own, matched in ranked:
            c = items[doc_id]
            cost = line(c)
            lengths.append(cost)
            # the line alone must fit (the marginal cost is never less), then the marginal
            if tally.used + cost <= limit and tally.used + (extra := tally.marginal(c)) <= limit:
                pick = _Pick(c, "cold", own, score, extra, matched, "taken")
                tally.take(c, extra)
                taken.append(pick)
                if trace:
                    out.considered.append(pick)
                continue
            left += matched
            if trace:
                pick = _Pick(c, "cold", own, score, matched=matched)
                pick.cost = tally.marginal(c)
                pick.reason = "left: budget"
                out.considered.append(pick)
        out.left += left
        # the rows ran out before the budget did: a line of the ranked rows' usual length
        # would still fit (so lines too long for what is left never widen the pool)
        usual = statistics.median_low(lengths) if lengths else 1
        out.ran_out = limit - tally.used >= usual
        return out

    def _finish(
        self,
        packed: _Packed,
        budget: int,
        trace: bool,
        beyond: int = 0,
        exact: bool = True,
    ) -> ResolveResult:
        """Render; if the assembled text still exceeds the budget, drop the last picks."""
        taken = packed.taken
        hot_overflow = packed.hot_left
        dropped = packed.left + beyond
        text = render([p.candidate for p in taken], dropped)
        used = total_tokens(self.costs, [p.candidate for p in taken], dropped)
        while used > budget and (taken or text):
            if not taken:
                text, used = "", 0
                break
            last = taken.pop()
            last.reason = "left: budget"
            if last.matched:
                hot_overflow = hot_overflow or last.phase == "hot"
                dropped += 1
            text = render([p.candidate for p in taken], dropped)
            used = total_tokens(self.costs, [p.candidate for p in taken], dropped)
        tiers = tuple(dict.fromkeys(p.phase for p in taken))
        once_ids = tuple(p.candidate.id for p in taken if p.phase == "hot" and p.candidate.once)
        rows = [_trace_row(p) for p in packed.considered] if trace else []
        return ResolveResult(
            text=text,
            items=[p.candidate for p in taken],
            tokens_used=used,
            tiers_used=tiers,
            dropped=dropped,
            hot_overflow=hot_overflow,
            trace=rows,
            once_ids=once_ids,
            dropped_exact=exact,
        )


# (packing key, id, score, own BM25, matched): one ranked cold candidate, see Resolver._cold
_Ranked = tuple[float, str, float, float, bool]


@dataclass
class _Packed:
    """What packing took (as picks) and how many matching candidates it left out."""

    taken: list[_Pick] = field(default_factory=list)
    left: int = 0
    hot_left: bool = False
    ran_out: bool = False  # the budget could take more than the ranked rows held
    considered: list[_Pick] = field(default_factory=list)  # every pick, for the trace


def _priority(candidate: Candidate) -> tuple[int, int, datetime, str]:
    """Hot order: L1 before L2 before L3, then more important, then older."""
    return (_LAYER_RANK[candidate.layer], -candidate.importance, candidate.created_at, candidate.id)


def _trace_row(pick: _Pick) -> dict[str, Any]:
    return {
        "id": pick.candidate.id,
        "key": pick.candidate.key,
        "layer": pick.candidate.layer,
        "phase": pick.phase,
        "bm25": round(pick.bm25, 4),
        "score": round(pick.score, 4),
        "tokens": pick.cost,
        "reason": pick.reason,
    }
