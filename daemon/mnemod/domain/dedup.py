"""Finding near-duplicates without chaining, and saying why two texts are (not) one memory.

Two entries of the same type are one memory when (docs/design.md §1, "Dedup"):
1. their keyword sets have Jaccard ≥ the floor (`jaccard_floor`): a plain set bound, so
   that candidates can be found by the keyword sets alone;
2. their score reaches the threshold: the keyword Jaccard with rare words weighing more
   (IDF over the rest of the store), with the unshared words of one text that say what an
   unshared word of the other says in another form read as that word (domain.rewordings):
   words that agree in their first `ALIGN_PREFIX` letters once inflections are folded
   ("purchased"/"purchase", "said"/"say", "posted"/"posting": a light stemmer for the score
   alone, domain.inflections) or that a small table of synonyms puts in one group ("said"/
   "told", "rose"/"climbed", "gov"/"governor": domain.synonyms), an acronym and the name it
   stands for ("CDC"/"Centers for Disease Control": domain.acronyms), a word written as one
   and as two ("website"/"web site"); plus `NEGATION_CREDIT` (at most 1 in all) when
   both texts negate (saying no to the same thing is a cue the keywords hide: stopwords
   drop "not"), times
   the balance of their lengths (a text that says much more than the other is another
   memory, not the same one in other words), less three penalties, read only for what
   would merge without them:
   - the wording penalty (`wording`). Half of the overlap of their words cut to four letters
     (stopwords too) less the overlap of their pairs of consecutive keywords, capped at
     `WORDING_CAP`, is what their wording shares beyond copied runs: the same words
     inflected ("planned"/"plans") and the same phrasing, a paraphrase's mark. Runs copied
     word for word beside a reworded rest mark one sentence with a clause added or cut,
     which says something else: the penalty is how far that term falls short of
     `WORDING_CENTRE` (about what a paraphrase reaches). A few words have no phrasing to
     read: it counts fully from `WORDING_TOKENS[1]` tokens (the shorter text), not at all
     up to `WORDING_TOKENS[0]`;
   - the clause penalty: `CLAUSE_PENALTY` for each word beyond `CLAUSE_FREE` of the
     longest run of one text's words that holds no keyword of the other (text_cues.
     unshared_run): a clause one says and the other does not ("…, and the mayor vetoed
     it"), where a paraphrase's unshared words are scattered rewordings. A pair too short
     to show one fully (the shorter text under `WORDING_TOKENS[1]` tokens) pays at least
     `CLAUSE_UNREAD`, what the threshold was lowered by for the penalty: short texts are
     held to the bar of before (a few words differing in one is a change, "rotates every
     month" then "each quarter now");
   - the figures penalty, `FIGURES_PENALTY` for each number one text has and the other
     lacks beyond the first: a figure only added is more detail, a changed one (one out,
     one in) or several added is another amount, and the more figures differ the more
     the texts are about different facts.
   They only ever lower the score, and the weighted Jaccard of the words as reworded
   (those of the two texts alone) with the credit is at most 1, so the score is at most
   the balance and the candidates' bounds stay those
   of the score without them;
3. no guard refuses: one text negates and the other does not.
Each step only refuses more than the one before, so every merge passes the floor.

A group is merged only if every pair in it passes: A~B and B~C with A≁C is two memories,
not one (servers that merged transitively built "mega-memories"). Dedup on add
(store.lookup) and GC's index find candidates in keyword postings by type and set size
(domain.size_classes); `candidate_pairs` (`mnemod dedupe --report`, one pass over a list of
entries) indexes only each entry's rarest words (a prefix filter), which for one pass is
the quicker of the two (0.91 s against 0.97 s over MRPC's 8,000 sentences at the report's
default 0.30, 0.55 against 0.75 s at the floor). Either way the cost follows real overlaps,
not n².
"""

from __future__ import annotations

import functools
import math
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from mnemod.config import DedupConfig
from mnemod.domain import rewordings as reword
from mnemod.domain import similar_pairs
from mnemod.domain import text_cues as cues
from mnemod.domain.model import Entry

# What decides a merge by default; the others are measured (bench/dedup.py) and left out
# because they refused more true duplicates than false ones.
TECHNIQUES = frozenset(
    {
        *("idf", "alignment", "synonyms", "acronyms", "compounds", "forenames", "balance"),
        "wording",
        *("clauses", "figures", "negation", "both_negate"),
    }
)
OPTIONAL_TECHNIQUES = frozenset({"containment", "numbers", "days", "names"})
GUARDS = ("negation", "numbers", "days", "names")
# the wording term (see the module doc and `wording`)
WORDING_CAP = 0.2
WORDING_CENTRE = 0.1
WORDING_TOKENS = (5, 15)  # the shorter text's length at which it starts and fully counts
ALIGN_PREFIX = reword.ALIGN_PREFIX  # letters two unshared keywords agree in to be one word
CLAUSE_FREE = 3  # words of an unshared run that cost nothing …
CLAUSE_PENALTY = 0.03  # … and what each further word costs
CLAUSE_UNREAD = 0.065  # what a pair too short to show a clause pays at least (see `clause`)
FIGURES_PENALTY = 0.03  # each number beyond the first that one text has and the other lacks
NEGATION_CREDIT = 0.06  # added to the weighted Jaccard (at most 1) when both texts negate


@dataclass(frozen=True)
class Candidate:
    a: str
    b: str
    score: float  # keyword Jaccard


def wording(a: Side, b: Side) -> float:
    """The wording penalty of the score (see the module doc), in [-WORDING_CENTRE - 1/2,
    0]; 0 when the shorter text is too short to read it."""
    share = _share(a, b)
    if share <= 0:
        return 0.0
    left, right = cues.shingles(a.text), cues.shingles(b.text)
    term = cues.overlap(left.prefixes, right.prefixes) - cues.overlap(left.pairs, right.pairs)
    return min(0.0, share * (min(WORDING_CAP, term / 2) - WORDING_CENTRE))


def _share(a: Side, b: Side) -> float:
    """How fully a penalty read from the phrasing counts: 0 up to `WORDING_TOKENS[0]`
    tokens of the shorter text, 1 from `WORDING_TOKENS[1]`."""
    start, full = WORDING_TOKENS
    return max(0.0, min(1.0, (min(a.length, b.length) - start) / (full - start)))


def clause(a: Side, b: Side) -> float:
    """The clause penalty (see the module doc), ≤ 0: at least `CLAUSE_UNREAD` when the
    shorter text is too short to show a clause fully."""
    run = max(
        cues.unshared_run(a.text, b.text, b.words), cues.unshared_run(b.text, a.text, a.words)
    )
    read = -CLAUSE_PENALTY * (run - CLAUSE_FREE) if run > CLAUSE_FREE else 0.0
    return min(read, -CLAUSE_UNREAD) if _share(a, b) < 1.0 else read


def penalty_ceiling(a: Side, b: Side, techniques: Collection[str] = TECHNIQUES) -> float:
    """The most the penalties can leave of a score before any is read (≤ 0): a pair too
    short to show a clause pays at least `CLAUSE_UNREAD` (`clause`), and none adds. A
    caller with the pair's `unworded_score` (GC's rule) refuses what cannot reach the
    threshold after it without reading them; 0 with containment, which merges a subset
    whatever it scores."""
    if "clauses" not in techniques or "containment" in techniques:
        return 0.0
    return -CLAUSE_UNREAD if _share(a, b) < 1.0 else 0.0


def jaccard_floor(config: DedupConfig) -> float:
    """The plain keyword-set Jaccard every merge reaches. Candidate pairs are found at this
    bound; the score and the guards only ever refuse more."""
    return config.floor


class Side(NamedTuple):
    """One text as dedup sees it: its keyword set, its text, its length in tokens and
    whether it negates (text_cues.negated; None: not read yet, then read from the text
    where a verdict needs it, as dedup on add leaves it for a candidate when the new text
    does not negate: then only the guard reads it, for a pair that would merge). A tuple:
    one is made per candidate on every add."""

    words: frozenset[str]
    text: str
    length: int
    negates: bool | None

    @classmethod
    def of(cls, entry: Entry) -> Side:
        return cls.read(frozenset(entry.keywords), entry.content, entry.tokens)

    @classmethod
    def read(cls, words: frozenset[str], text: str, length: int) -> Side:
        """The side of a text, its negation read from it."""
        return cls(words, text, length, cues.negated(text))


class Similarity(NamedTuple):
    """Whether two texts are one memory, and why: `refused_by` is None for a merge, else
    "floor", "score" or the name of the guard that refused."""

    jaccard: float
    score: float
    floor: float
    threshold: float
    refused_by: str | None
    wording: float = 0.0  # the wording penalty within `score` (0 when it was not read)
    clause: float = 0.0  # the clause penalty within `score` (likewise)
    figures: float = 0.0  # the figures penalty within `score` (likewise)
    both_negate: float = 0.0  # what the credit for both texts negating adds to `score`
    # what aligning synonyms (domain.synonyms), reading acronyms as their names and
    # compounds as their parts and a forename as given before a titled surname add to
    # `score` (read when compare explains)
    synonyms: float = 0.0
    acronyms: float = 0.0
    compounds: float = 0.0
    forenames: float = 0.0

    @property
    def merges(self) -> bool:
        return self.refused_by is None

    def as_dict(self) -> dict[str, Any]:
        return {
            "jaccard": round(self.jaccard, 3),
            "score": round(self.score, 3),
            "floor": self.floor,
            "threshold": self.threshold,
            "merges": self.merges,
            "refused_by": self.refused_by,
            "wording": round(self.wording, 3),
            "clause": round(self.clause, 3),
            "figures": round(self.figures, 3),
            "both_negate": round(self.both_negate, 3),
            "synonyms": round(self.synonyms, 3),
            "acronyms": round(self.acronyms, 3),
            "compounds": round(self.compounds, 3),
            "forenames": round(self.forenames, 3),
        }


@functools.lru_cache(maxsize=1 << 16)
def weight(others: int, holding: int) -> float:
    """A word's weight: rarer in the rest of the store weighs more (smoothed IDF). With no
    other entry every word weighs 1 and the weighted Jaccard is the plain one. Counts taken
    before the entries compared came (GC's, domain.similar_pairs.WordCounts) may hold fewer
    entries than hold the word: at most every other entry holds it. Cached: the same few
    counts recur on every add."""
    others = max(0, others)
    return math.log((1 + others) / (1 + min(max(0, holding), others))) + 1.0


class Weights(Protocol):
    def jaccard(self, a: frozenset[str], b: frozenset[str]) -> float:
        """The weighted Jaccard of two keyword sets."""
        ...


class PairWeights:
    """Word weights from document frequencies: `holding(word)` is how many entries other
    than the two compared hold the word, out of `others` entries."""

    def __init__(self, holding: Callable[[str], int], others: int) -> None:
        self.holding, self.others = holding, others

    def jaccard(self, a: frozenset[str], b: frozenset[str]) -> float:
        common = sum(weight(self.others, self.holding(w)) for w in a & b)
        apart = sum(weight(self.others, self.holding(w)) for w in a ^ b)
        return common / (common + apart) if common + apart else 0.0


class ProbeWeights:
    """The same weights for one new text against many stored ones (dedup on add), its own
    words weighed once, on the first comparison: `stored(word)` counts the stored entries
    holding the word, `others` is their number less the one compared; the probe is not
    among them."""

    def __init__(self, probe: frozenset[str], stored: Callable[[str], int], others: int) -> None:
        self.probe, self.stored, self.others = probe, stored, others
        self._shared: dict[str, float] = {}  # a probe word's weight when the other has it
        self._alone: dict[str, float] = {}  # … when it does not
        self._theirs: dict[str, float] = {}  # another word's weight

    def jaccard(self, a: frozenset[str], b: frozenset[str]) -> float:
        """`a` is the probe."""
        others, theirs = self.others, self._theirs
        if not self._shared:
            for w in self.probe:
                held = self.stored(w)
                self._shared[w], self._alone[w] = weight(others, held - 1), weight(others, held)
        common = sum(map(self._shared.__getitem__, a & b))
        apart = sum(map(self._alone.__getitem__, a - b))
        for w in b - a:
            if w not in theirs:
                theirs[w] = weight(others, self.stored(w) - 1)
            apart += theirs[w]
        return common / (common + apart) if common + apart else 0.0


def compare(
    a: Side,
    b: Side,
    config: DedupConfig,
    weights: Weights | None = None,
    techniques: Collection[str] = TECHNIQUES,
    unworded: float | None = None,
    explain: bool = False,
) -> Similarity:
    """Whether `a` and `b` are one memory; `weights` weigh each word by its rarity (None:
    every word alike). `unworded`: the pair's `unworded_score` with the same weights and
    techniques when the caller has it (dedup on add bounds each candidate by it), so that
    it is not read twice. `explain`: read what the synonyms, acronyms, compounds and forenames added
    (`dedupe --report`; dedup on add and GC only need the verdict)."""
    floor, threshold = jaccard_floor(config), config.threshold
    shared = a.words & b.words
    union = len(a.words) + len(b.words) - len(shared)
    plain = len(shared) / union if union else 0.0

    # the penalties, once read, and the credit
    terms = dict.fromkeys(_TERMS, 0.0)

    def verdict(score: float, refused_by: str | None) -> Similarity:
        read = terms.values()
        return Similarity(plain, score, floor, threshold, refused_by, *read)

    if plain < floor - 1e-9 or not union:
        return verdict(plain, "floor")
    score = unworded_score(a, b, plain, weights, techniques) if unworded is None else unworded
    if "both_negate" in techniques and _negates(a) and _negates(b):  # what the credit added
        terms["both_negate"] = score - unworded_score(
            a, b, plain, weights, frozenset(techniques) - _CREDIT
        )
    for name in _rewordings(a, b, techniques) if explain else ():  # what each rewording added
        terms[name] = score - unworded_score(a, b, plain, weights, frozenset(techniques) - {name})
    contained = "containment" in techniques and (a.words <= b.words or b.words <= a.words)
    # the penalties, read only for what would merge without them
    for name, penalty in _PENALTIES:
        if score < threshold - 1e-9 and not contained:
            return verdict(score, "score")
        if name in techniques:
            terms[name] = penalty(a, b)
            score += terms[name]
    if score < threshold - 1e-9 and not contained:
        return verdict(score, "score")
    for guard in GUARDS:
        if guard in techniques and _differ(guard, a, b):
            return verdict(score, guard)
    return verdict(score, None)


def unworded_score(
    a: Side,
    b: Side,
    plain: float,
    weights: Weights | None = None,
    techniques: Collection[str] = TECHNIQUES,
) -> float:
    """The score before the penalties (`plain`: the pair's keyword Jaccard), which only
    lower it: what `compare` scores at most."""
    theirs = b.words
    if "alignment" in techniques:
        theirs = reword.aligned(a.words, theirs, "synonyms" in techniques)
    if "acronyms" in techniques:
        theirs = reword.spelled_out(a.words, a.text, theirs, b.text)
    if "compounds" in techniques:
        theirs = reword.joined_up(a.words, theirs)
    if "forenames" in techniques:
        theirs = reword.forenamed(a.words, a.text, theirs, b.text)
    if "idf" in techniques and weights is not None:
        score = weights.jaccard(a.words, theirs)
    else:
        score = plain if theirs is b.words else cues.overlap(a.words, theirs)
    # (a new text on add has its flag read: most do not negate, and cost one look here)
    if a.negates is not False and _negates(a) and _negates(b) and "both_negate" in techniques:
        score = min(1.0, score + NEGATION_CREDIT)  # at most 1: the score stays within the balance
    if "balance" in techniques:
        longer = max(a.length, b.length)
        score *= min(a.length, b.length) / longer if longer > 0 else 1.0
    return score


def figures(a: Side, b: Side) -> float:
    """The figures penalty (see the module doc), ≤ 0: `FIGURES_PENALTY` for each number one
    text has and the other lacks beyond the first."""
    differ = len(cues.numbers(a.text) ^ cues.numbers(b.text))
    return -FIGURES_PENALTY * (differ - 1) if differ > 1 else 0.0


# the penalties in the order they are read (the cheapest to read last is the dearest)
_PENALTIES: tuple[tuple[str, Callable[[Side, Side], float]], ...] = (
    ("wording", wording),
    ("figures", figures),
    ("clauses", clause),
)


_CREDIT = frozenset({"both_negate"})
# the terms of a verdict besides its score, in Similarity's order
_TERMS = (
    *("wording", "clauses", "figures", "both_negate"),
    *("synonyms", "acronyms", "compounds", "forenames"),
)


def _rewordings(a: Side, b: Side, techniques: Collection[str]) -> list[str]:
    """Which of the synonyms, acronyms, compounds and forenames change what the pair's words align
    to (only for those is what they add read, for the verdict)."""
    mine, theirs = a.words, b.words
    found = []
    if "synonyms" in techniques and "alignment" in techniques:
        plain = reword.aligned(mine, theirs, False)
        found += ["synonyms"] if reword.aligned(mine, theirs) != plain else []
    if "acronyms" in techniques:
        spelled = reword.spelled_out(mine, a.text, theirs, b.text)
        found += ["acronyms"] if spelled is not theirs else []
    if "compounds" in techniques:
        found += ["compounds"] if reword.joined_up(mine, theirs) is not theirs else []
    if "forenames" in techniques:
        named = reword.forenamed(mine, a.text, theirs, b.text)
        found += ["forenames"] if named is not theirs else []
    return found


def _negates(side: Side) -> bool:
    return cues.negated(side.text) if side.negates is None else side.negates


def _differ(guard: str, a: Side, b: Side) -> bool:
    if guard == "negation":
        return _negates(a) != _negates(b)
    if guard == "numbers":
        return cues.numbers(a.text) != cues.numbers(b.text)
    if guard == "days":
        return cues.days(a.text) != cues.days(b.text)
    return bool(cues.names(a.text) ^ cues.names(b.text))


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


def judged_pairs(
    entries: Iterable[Entry],
    config: DedupConfig,
    below: float | None = None,
    techniques: Collection[str] = TECHNIQUES,
    counts: similar_pairs.WordCounts | None = None,
) -> list[tuple[Candidate, Similarity]]:
    """Every pair of the same type with keyword Jaccard ≥ `below` (default: the floor) and
    the verdict on it, with document frequencies `counts` (default: over `entries`); best
    Jaccard first."""
    listed = list(entries)
    taken = counts if counts is not None else similar_pairs.WordCounts.of(listed)
    frequency, per_type = taken.frequency, taken.per_kind
    by_id = {e.id: e for e in listed}
    start = jaccard_floor(config) if below is None else min(below, jaccard_floor(config))
    judged: list[tuple[Candidate, Similarity]] = []
    for pair in candidate_pairs(listed, start):
        a, b = Side.of(by_id[pair.a]), Side.of(by_id[pair.b])
        kind = by_id[pair.a].type

        def holding(word: str, a: Side = a, b: Side = b, kind: str = kind) -> int:
            return frequency.get((kind, word), 0) - (word in a.words) - (word in b.words)

        others = per_type.get(kind, 0) - 2
        verdict = compare(a, b, config, PairWeights(holding, others), techniques, explain=True)
        judged.append((pair, verdict))
    return judged


def merge_groups(
    entries: list[Entry],
    config: DedupConfig,
    techniques: Collection[str] = TECHNIQUES,
    counts: similar_pairs.WordCounts | None = None,
) -> list[list[Entry]]:
    """Groups (oldest first) in which every pair is one memory; no chaining; word weights
    from `counts` (default: over `entries`)."""
    by_id = {e.id: e for e in entries}
    similar: dict[str, dict[str, float]] = defaultdict(dict)
    for pair, verdict in judged_pairs(entries, config, techniques=techniques, counts=counts):
        if not verdict.merges:
            continue
        similar[pair.a][pair.b] = verdict.score
        similar[pair.b][pair.a] = verdict.score
    return similar_pairs.merge_groups(similar, by_id)
