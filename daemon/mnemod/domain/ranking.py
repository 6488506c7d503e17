"""Scoring for resolve's ranked phase: BM25 relevance, a neighbour boost, mild priors.

relevance = BM25(query, item) + neighbour bonus (a hit's BM25 × 0.65, × 0.7 per further step;
            × 1.5 for the item right after a hit that ends with a question: its answer)
score     = relevance × importance factor × (1 + frecency boost) × time cues

Measured on LoCoMo (bench/recall.py; recall at 200/500/1000/2000 tokens): plain BM25
.49/.60/.68/.74; + suffix folding .52/.64/.72/.78; + neighbours (±2 turns within 15 min)
.62/.78/.85/.91; + time cues (domain/time_cues.py: a "when" question favours memories that
say when, × 1.3; a named period favours the memories from it, × 1.5) .63/.78/.85/.91,
temporal questions at 200 tokens .79 → .84, no category lower at any budget; + person cues
(domain/person_cues.py: a question after several things about someone named favours the
memories attributed to them, then × 1.4; now × 2, see below) .64/.80/.86/.91, multi-hop
.55 → .58 at 1,000 tokens, no category or conversation lower at any budget (a cue for every
question naming someone lifted multi-hop more but lost adversarial questions, which credit
one person with what the other said); + a longer neighbour reach (±3 turns, the bonus × 0.65
next to the hit and × 0.7 per further step, was ±2, × 0.6 and × 0.5) .66/.80/.86/.92 through
the public API (held-out questions .62/.74/.81/.86 → .66/.75/.82/.86, multi-hop .58 → .59 at
1,000 tokens, no category lower at any budget): an answer is often a turn or two past the
reply to the question that names its topic; + the answer bonus (the turn right after one
that ends with "?" takes 1.5 × its BM25, not 0.65: on LoCoMo a gold turn follows a question
in 47 % of cases, any turn in 25 %; a question names what it asks for, its answer holds it)
.68/.81/.86/.92 → .71/.82/.88/.92 with the shorter date lines (domain/framing.py), held-out
.67/.75/.82/.86 → .70/.77/.84/.87, multi-hop at 1,000 tokens .60 → .62; 1.3-1.7 do about as
well, 2.0 loses at 200 tokens, and demoting the questions themselves (× 0.8-0.9) lost
answers that end by asking back. Packing by score per token instead of score order lost .22
at 200 tokens: BM25 already normalises for length, and short turns are cheap but rarely the
answer — so the default packs in score order (`density_exponent` = 0), skipping what does
not fit; a mild preference for short items (`density_exponent` 0.05-0.2) lost at 500 and
1,000 tokens as well. The person cue's × 2 (was × 1.4): for the questions it applies to,
93 % of the gold turns on LoCoMo are the named person's, against about half of all memories;
.713/.822/.884/.922 → .715/.822/.884/.923, multi-hop .24/.39/.62/.71 → .26/.39/.62/.72,
held-out questions at 2,000 tokens .868 → .872, no category, split or conversation lower at
any budget (× 2.5 lost an adversarial question at 200 tokens). A prompt's word in no memory
counting through its kin at 0.5 × (domain/word_kin.py), with "-ied" and "-y" folded alike:
.715/.822/.884/.923 → .718/.825/.887/.927, temporal .84/.91/.95/.97 → .86/.92/.97/.98.
The event cue: where the person cue applies, the named person's memories that say when
(they tell of something done: "yesterday I took the kids to the museum") × 1.6 more,
unless the prompt asks when or names a period (the time cues weigh those by time): lists
of activities, places or purchases are made of such reports. .718/.825/.887/.927 →
.718/.826/.888/.932, multi-hop .26/.39/.62/.72 → .26/.39/.62/.74, held-out questions at
2,000 tokens .872 → .887, no category, split or conversation lower at any budget (× 1.4
lost at 500 tokens, multi-hop .39 → .38; × 1.8 at 200, multi-hop .26 → .23, though .890
at 1,000).

Only relevance decides *whether* an item is a candidate; importance and frecency only
reorder candidates that already match. Frecency is deliberately weak: an item selected by
earlier prompts is weak evidence of relevance now, and a strong boost would let past
selections crowd out what the current prompt asks for (a rich-get-richer loop).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from mnemod.domain.keywords import WORDS_CACHED, terms

# Words that carry the *shape* of a question, not its topic ("what kind of …", "how many …").
# Removed from prompts only; memories keep them.
QUERY_STOPWORDS = frozenset(
    (
        "kind",
        "type",
        "sort",
        "many",
        "much",
        "long",
        "often",
        "ever",
        "likely",
        "think",
        "thing",
        "things",
        "something",
        "anything",
        "know",
        "tell",
        "remember",
        "mention",
        "mentioned",
        "say",
        "said",
        "recently",
        "usually",
    )
)


@dataclass(frozen=True)
class RankingSettings:
    """Tuning knobs of the ranked phase; defaults measured on LoCoMo (see bench/recall.py)."""

    k1: float = 1.2
    b: float = 0.75
    importance_weight: float = 0.1  # importance 5 → ×1.2, 1 → ×0.8
    frecency_weight: float = 0.01  # at most +1 % for a much-used, recently used item
    frecency_saturation: int = 10  # accesses at which the frecency boost is full
    frecency_half_life_days: float = 14.0
    neighbour_weight: float = 0.65  # a turn next to a hit gets 0.65 × the hit's BM25
    neighbour_span: int = 3  # how many items on each side count as neighbours
    neighbour_decay: float = 0.7  # the weight shrinks by this factor per further step
    neighbour_window_s: float = 900.0  # only items created this close in time are neighbours
    answer_weight: float = 1.5  # the item right after one that asks gets this × its BM25
    min_relative_score: float = 0.1  # cold items scoring below this × the best are not relevant
    density_exponent: float = 0.0  # pack by score / cost**x: 1 = per token, 0 = rank order
    pool_floor: int = 20  # BM25 hits ranked at least (the top-k, see Resolver.resolve) …
    pool_per_token: float = 0.025  # … or this many per token of budget, whichever is more
    fold_suffixes: bool = True
    query_stopwords: bool = True
    # time cues (domain/time_cues.py): factors on memories that answer when, or are from when
    when_weight: float = 0.3  # a "when" question and a memory that says when: × (1 + this)
    date_weight: float = 0.5  # a memory from a period the prompt names: × (1 + this)
    date_slack_days: float = 7.0  # … or this soon after it (events are told after they happen)
    # person cues (domain/person_cues.py): a question after several things about someone
    speaker_weight: float = 1.0  # … and a memory attributed to them: × (1 + this)
    event_weight: float = 0.6  # … that tells when (of an event): × (1 + this) more
    # a prompt's word in no memory (domain/word_kin.py): its kin count this × a word's BM25
    kin_weight: float = 0.5


@functools.lru_cache(maxsize=WORDS_CACHED)
def fold(word: str) -> str:
    """A second, light stemming pass: painted/painting/paints → paint, loved/love → lov,
    and a final y after a consonant as i, as "-ied" leaves it: applied/apply/applies →
    appli, studying/studied → studi. Cached like `keywords.term_of`, for the same reason."""
    folded = _fold_suffix(word)
    if len(folded) > 3 and folded[-1] == "y" and folded[-2] not in "aeiouy" and folded.isascii():
        return folded[:-1] + "i"
    return folded


def _fold_suffix(word: str) -> str:
    if not word.isascii() or len(word) <= 4:
        return word
    if word.endswith("ing") and len(word) >= 6:
        word = word[:-3]
    elif word.endswith("ed") and len(word) >= 5:
        word = word[:-2]
    else:
        return word[:-1] if word.endswith("e") else word
    if len(word) >= 3 and word[-1] == word[-2] and word[-1] not in "lsz":
        word = word[:-1]
    return word[:-1] if word.endswith("e") and len(word) > 3 else word


def analyze(text: str, settings: RankingSettings) -> list[str]:
    """The terms a memory is indexed under (the shared tokenizer, optionally folded)."""
    found = terms(text)
    if settings.fold_suffixes:
        return list(map(fold, found))
    return found


def query_terms(prompt: str, settings: RankingSettings) -> list[str]:
    """The prompt's topic terms: analyzed like memories, question-shape words left out."""
    found = analyze(prompt, settings)
    if not settings.query_stopwords:
        return found
    stop = {fold(w) if settings.fold_suffixes else w for w in QUERY_STOPWORDS}
    kept = [word for word in found if word not in stop]
    return kept or found


def asks(content: str) -> bool:
    """Whether a memory ends by asking a question, which the next one is likely to answer
    (see `with_neighbours`)."""
    return content.rstrip().endswith(("?", "？"))


def importance_factor(importance: int, settings: RankingSettings) -> float:
    return 1.0 + settings.importance_weight * (importance - 3)


def frecency_boost(
    access_count: int, last_accessed_at: datetime, now: datetime, settings: RankingSettings
) -> float:
    """A small bonus in [0, frecency_weight]: how often (log-saturated) × how recently."""
    if access_count <= 0 or settings.frecency_weight <= 0:
        return 0.0
    frequency = min(1.0, math.log1p(access_count) / math.log1p(settings.frecency_saturation))
    age_days = max(0.0, (now - last_accessed_at).total_seconds() / 86400)
    recency = math.pow(0.5, age_days / settings.frecency_half_life_days)
    return settings.frecency_weight * frequency * recency


def with_neighbours(
    own: Mapping[str, float],
    neighbours: Mapping[str, Iterable[tuple[str, int]]],
    settings: RankingSettings,
    asks: Callable[[str], bool] | None = None,
) -> dict[str, float]:
    """Relevance: each item's own BM25 plus its best neighbour bonus, `weight` × the
    neighbour's own BM25 (× `decay` per further step).

    A reply often holds the answer to the question asked just before it, and a question
    names what the reply is about; items with no term of their own can enter this way, but
    only through a neighbour that does match. `own` holds the BM25 of the items that match
    (absent = 0); `neighbours` lists (id, distance) pairs by item, the distance negative for
    an item before it, and each pair counts both ways (the relation is symmetric), so
    listing the neighbours of the hits is enough to give the hits the bonus of their
    neighbours and the neighbours the bonus of the hits. With `asks` (whether an item, by
    id, ends with a question), the item right after one that asks gets `answer_weight` ×
    its BM25 instead: in a conversation the turn after a question is its answer, which
    holds what was asked for where the question only names it.
    """
    weight = settings.neighbour_weight
    out = dict(own)
    if weight <= 0:
        return out
    decay = settings.neighbour_decay
    factors = [weight * math.pow(decay, d) for d in range(settings.neighbour_span)]
    answer = settings.answer_weight
    bonus: dict[str, float] = {}
    best = bonus.get
    for doc_id, row in neighbours.items():
        mine = own.get(doc_id, 0.0)
        for other, distance in row:
            step = abs(distance)
            given = got = factors[step - 1] if step <= len(factors) else 0.0
            if step == 1 and asks is not None:  # the later answers the earlier if it asks
                if distance > 0 and asks(doc_id):
                    given = answer
                elif distance < 0 and asks(other):
                    got = answer
            if (given := given * mine) > best(other, 0.0):
                bonus[other] = given
            if (got := got * own.get(other, 0.0)) > best(doc_id, 0.0):
                bonus[doc_id] = got
    for doc_id, value in bonus.items():
        out[doc_id] = own.get(doc_id, 0.0) + value
    return out


def pack_key(score: float, cost: int, settings: RankingSettings) -> float:
    """Greedy packing order: score per token (density_exponent 1) down to rank order (0)."""
    return score / math.pow(max(cost, 1), settings.density_exponent)
