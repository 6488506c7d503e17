"""The incremental BM25 index: scores match a from-scratch computation after any edits."""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Collection, Iterator
from contextlib import contextmanager

from hypothesis import given, settings
from hypothesis import strategies as st

from mnemod.domain import bm25
from mnemod.domain.bm25 import Bm25Index, Bm25Params, TopK


def reference_scores(
    docs: dict[str, list[str]], query: list[str], k1: float = 1.2, b: float = 0.75
) -> dict[str, float]:
    n = len(docs)
    avgdl = sum(len(t) for t in docs.values()) / n if n else 0.0
    out: dict[str, float] = {}
    for term in dict.fromkeys(query):
        df = sum(1 for t in docs.values() if term in t)
        if not df:
            continue
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        for doc_id, terms in docs.items():
            tf = terms.count(term)
            if tf:
                norm = k1 * (1 - b + b * len(terms) / avgdl)
                out[doc_id] = out.get(doc_id, 0.0) + idf * tf * (k1 + 1) / (tf + norm)
    return out


def test_scores_only_documents_sharing_a_term() -> None:
    index = Bm25Index()
    index.add("a", ["billing", "invoice", "stripe"])
    index.add("b", ["kubernetes", "deploy"])
    index.add("c", ["invoice", "invoice", "refund"])
    scores = index.scores(["invoice"])
    assert set(scores) == {"a", "c"}
    assert scores["c"] > scores["a"]  # higher term frequency, same length class
    assert index.scores(["absent"]) == {}


def test_add_remove_update_keep_statistics() -> None:
    index = Bm25Index()
    index.add("a", ["x", "y"])
    index.add("b", ["x", "z", "z"])
    assert len(index) == 2
    assert index.df("x") == 2
    assert index.avgdl == 2.5
    index.update("a", ["y"])
    assert index.df("x") == 1
    assert index.avgdl == 2.0
    assert index.remove("b")
    assert not index.remove("b")
    assert index.df("x") == 0
    assert index.df("z") == 0
    assert "b" not in index
    assert index.avgdl == 1.0
    index.remove("a")
    assert len(index) == 0
    assert index.avgdl == 0.0
    assert index.scores(["y"]) == {}


def test_rare_terms_weigh_more() -> None:
    index = Bm25Index()
    for i in range(20):
        index.add(f"d{i}", ["common", f"filler{i}"])
    index.add("rare", ["common", "zebra"])
    assert index.idf("zebra") > index.idf("common") > 0


def test_parameters_are_used() -> None:
    index = Bm25Index(Bm25Params(k1=2.0, b=0.0))
    index.add("short", ["t"])
    index.add("long", ["t", "u", "v", "w"])
    scores = index.scores(["t"])
    assert math.isclose(scores["short"], scores["long"])  # b = 0: no length normalisation


VOCAB = st.sampled_from(["alpha", "beta", "gamma", "delta", "eps", "zeta"])
OPS = st.lists(
    st.tuples(
        st.sampled_from(["add", "remove"]), st.sampled_from("abcdefg"), st.lists(VOCAB, max_size=6)
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(ops=OPS, query=st.lists(VOCAB, min_size=1, max_size=4))
def test_incremental_equals_rebuild(
    ops: list[tuple[str, str, list[str]]], query: list[str]
) -> None:
    index = Bm25Index()
    docs: dict[str, list[str]] = {}
    for op, doc_id, terms in ops:
        if op == "add":
            index.add(doc_id, terms)
            docs[doc_id] = terms
        else:
            assert index.remove(doc_id) == (doc_id in docs)
            docs.pop(doc_id, None)
    expected = reference_scores(docs, query)
    got = index.scores(query)
    assert set(got) == set(expected)
    for doc_id, value in expected.items():
        assert math.isclose(got[doc_id], value, rel_tol=1e-9)


def exact_top(scores: dict[str, float], k: int, exclude: frozenset[str]) -> list[str]:
    ranked = sorted((d for d in scores if d not in exclude), key=lambda d: (-scores[d], d))
    return ranked[:k]


ZIPF = st.sampled_from(["a", "a", "a", "a", "b", "b", "b", "c", "c", "d", "e", "f", "g", "h"])
DOCS = st.dictionaries(
    st.text("pqrstuvwxyz", min_size=1, max_size=3), st.lists(ZIPF, max_size=8), max_size=60
)


@settings(max_examples=300, deadline=None)
@given(
    docs=DOCS,
    query=st.lists(ZIPF, min_size=1, max_size=5),
    k=st.integers(0, 12),
    drop=st.lists(st.text("pqrstuvwxyz", min_size=1, max_size=3), max_size=5),
    excluded=st.frozensets(st.text("pqrstuvwxyz", min_size=1, max_size=2), max_size=4),
)
def test_top_k_equals_exact_top_k(
    docs: dict[str, list[str]], query: list[str], k: int, drop: list[str], excluded: frozenset[str]
) -> None:
    index = Bm25Index()
    for doc_id, terms in docs.items():
        index.add(doc_id, terms)
    for doc_id in drop:  # removals leave the index as if built without them
        index.remove(doc_id)
        docs.pop(doc_id, None)
    full = index.scores(query)
    found = index.top_k(query, k, exclude=excluded)
    want = exact_top(full, k, excluded)
    got = sorted(found.scores, key=lambda d: (-found.scores[d], d))
    assert [full[d] for d in got] == [full[d] for d in want]  # the same scores, ties aside
    if want:  # beyond ties at the cut, the very same documents
        assert {d for d in got if full[d] != full[want[-1]]} <= set(want)
    for doc_id, value in found.scores.items():
        assert value == full[doc_id]  # summed like scores(), so bit-identical
    matches = {d for d in full if d not in excluded}
    if found.complete:
        assert set(found.scores) == matches
    if found.complete:
        assert found.count_at_least(0.0, excluded) == 0
    else:
        assert found.count_at_least(0.0, excluded) <= len(matches - set(found.scores))
    # scoring more documents with the search's help gives the same floats as without it
    some = [*docs, "absent", *docs]  # a document asked for twice counts once
    assert index.score_docs(query, some, found) == index.score_docs(query, some)


def test_top_k_skips_the_common_term_for_a_rare_one() -> None:
    index = Bm25Index()
    for i in range(500):
        index.add(f"d{i:03d}", ["caroline", f"w{i}", "filler"])
    for i in range(5):
        index.add(f"r{i}", ["caroline", "sunrise", "lake"])
    found = index.top_k(["caroline", "sunrise"], 3)
    assert set(found.scores) <= {f"r{i}" for i in range(5)} and len(found.scores) == 3
    assert not found.complete
    assert len(found.lower) < 100  # the common term's 505 postings were not all walked
    exact = index.scores(["caroline", "sunrise"])
    assert all(found.scores[d] == exact[d] for d in found.scores)
    assert index.top_k(["caroline", "sunrise"], 1000).complete


def test_cached_contributions_follow_every_change() -> None:
    """Group contributions are kept between queries; any add or remove invalidates them."""
    docs = {"a": ["x", "y"], "b": ["x", "x", "z"], "c": ["y", "z", "z", "w"]}
    index = Bm25Index()
    for doc_id, terms in docs.items():
        index.add(doc_id, terms)
    for change in ("add", "update", "remove"):
        index.top_k(["x", "z"], 2)  # fills the cache of group contributions
        if change == "add":
            docs["d"] = ["x", "w"]
            index.add("d", docs["d"])
        elif change == "update":
            docs["a"] = ["z"]
            index.update("a", docs["a"])
        else:
            del docs["b"]
            index.remove("b")
        want = reference_scores(docs, ["x", "z"])
        got = index.scores(["x", "z"])
        assert got.keys() == want.keys()
        assert all(math.isclose(got[d], want[d]) for d in want)
        top = index.top_k(["x", "z"], 10)
        assert top.complete and top.scores == got


@contextmanager
def by_document(enabled: bool) -> Iterator[None]:
    """Every term summed from its by-document contributions (or none), whatever its df."""
    saved = bm25._BY_DOC_MIN_DF, bm25._BY_DOC_MIN_SHARE, bm25._BY_DOC_LOOKUPS
    wanted = (1, 1 << 30, 1 << 30) if enabled else (1 << 30, 1, 1)
    bm25._BY_DOC_MIN_DF, bm25._BY_DOC_MIN_SHARE, bm25._BY_DOC_LOOKUPS = wanted
    try:
        yield
    finally:
        bm25._BY_DOC_MIN_DF, bm25._BY_DOC_MIN_SHARE, bm25._BY_DOC_LOOKUPS = saved


def search(
    index: Bm25Index, query: list[str], k: int, exclude: frozenset[str]
) -> tuple[object, ...]:
    found = index.top_k(query, k, exclude=exclude)
    some = [*index._doc_terms, "absent"]
    return (
        list(found.scores.items()),
        found.complete,
        list(found.lower.items()),
        found.known,
        found.walked,
        index.score_docs(query, some, found),
    )


@settings(max_examples=150, deadline=None)
@given(
    docs=st.dictionaries(
        st.text("pqrstuvwxyz", min_size=1, max_size=3),
        st.lists(ZIPF, min_size=1, max_size=12),
        max_size=40,
    ),
    query=st.lists(ZIPF, min_size=1, max_size=5),
    k=st.integers(1, 12),
    excluded=st.frozensets(st.text("pqrstuvwxyz", min_size=1, max_size=2), max_size=4),
    extra=st.lists(ZIPF, min_size=1, max_size=6),
)
def test_by_document_sums_equal_group_walks(
    docs: dict[str, list[str]],
    query: list[str],
    k: int,
    excluded: frozenset[str],
    extra: list[str],
) -> None:
    """Summing a common term from its cached by-document contributions gives the very same
    search (scores, bounds, order) as walking its groups, before and after a change."""
    index = Bm25Index()
    for doc_id, terms in docs.items():
        index.add(doc_id, terms)
    for step in range(2):
        with by_document(False):
            walked = search(index, query, k, excluded)
        with by_document(True):
            cached = search(index, query, k, excluded)
            assert search(index, query, k, excluded) == cached  # from the cache
        assert cached == walked
        if step == 0:
            index.add("new", extra)  # the cached contributions must follow the change


@settings(max_examples=150, deadline=None)
@given(docs=DOCS, query=st.lists(ZIPF, min_size=1, max_size=5), k=st.integers(1, 12))
def test_large_groups_are_summed_as_small_ones(
    docs: dict[str, list[str]], query: list[str], k: int
) -> None:
    """`top_k` inserts the documents of a large group it has not met yet in one call: the
    partial sums, their order and the result are those of adding every document alone."""
    index = Bm25Index()
    for doc_id, terms in docs.items():
        index.add(doc_id, terms)
    saved = bm25._SMALL_GROUP
    found = []
    try:
        for small in (1 << 30, 1):  # every group one by one, then every group at once
            bm25._SMALL_GROUP = small
            top = index.top_k(query, k)
            found.append((list(top.lower.items()), top.scores, top.complete, top.walked))
    finally:
        bm25._SMALL_GROUP = saved
    assert found[0] == found[1]


def plain_top_k(index: Bm25Index, query: list[str], k: int, exclude: Collection[str]) -> TopK:
    """`Bm25Index.top_k`'s MaxScore walk done plainly: each threshold from the depth best
    of all partials, every pooled document summed in full and the k best taken from all."""
    present = [t for t in dict.fromkeys(query) if t in index._groups]
    if k <= 0 or not present:
        return TopK({}, complete=not present)
    weighted = index._weighted(present)
    impacts = {t: index._impacts(t) for t in present}
    plan = sorted(present, key=lambda t: (-impacts[t][0][0], index.df(t), t))
    rest = [0.0] * (len(plan) + 1)
    for i in range(len(plan) - 1, -1, -1):
        rest[i] = rest[i + 1] + impacts[plan[i]][0][0] * (1.0 + bm25._SLACK)
    depth = k + len(exclude)
    acc: dict[str, float] = {}
    known: dict[str, float] = {}
    theta = 0.0
    essential = len(plan)
    for i, term in enumerate(plan):
        if len(acc) >= depth:
            best = heapq.nlargest(depth, acc.items(), key=lambda item: item[1])
            index._exact(weighted, [d for d, _ in best if d not in known], known)
            theta = max(theta, min(known[d] for d, _ in best))
            if rest[i] < theta:
                essential = i
                break
        for value, _, docs in impacts[term]:
            for doc_id in docs:
                acc[doc_id] = acc.get(doc_id, 0.0) + value
    pool = acc
    if essential < len(plan):
        pool = {d: p for d, p in acc.items() if p + rest[essential] >= theta}
        index._add_groups(plan[essential:], pool)
    pool = {d: s for d, s in pool.items() if d not in exclude}
    if len(pool) > k:
        cut = heapq.nlargest(k, pool.values())[-1]
        near = sorted(
            ((d, s) for d, s in pool.items() if s >= cut * (1.0 - bm25._SLACK)),
            key=lambda item: (-item[1], item[0]),
        )
        chosen = [d for d, _ in near[:k]]
    else:
        chosen = list(pool)
    index._exact(weighted, [d for d in chosen if d not in known], known)
    return TopK(
        {d: known[d] for d in chosen},
        complete=essential == len(plan) and len(pool) <= k,
        lower=acc,
        known=known,
        walked=frozenset(plan[:essential]),
    )


def zipf_corpus(seed: int, size: int) -> dict[str, list[str]]:
    """Documents over a Zipf vocabulary, many very short (a term's best contributions), a
    fifth of them repeated (ties of every kind)."""
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(60)]
    weights = [1.0 / (rank + 1) for rank in range(len(vocab))]
    docs: dict[str, list[str]] = {}
    for i in range(size):
        if docs and rng.random() < 0.2:
            docs[f"d{i:04d}"] = list(rng.choice(list(docs.values())))
        else:
            length = rng.randint(1, 3) if rng.random() < 0.4 else rng.randint(4, 14)
            docs[f"d{i:04d}"] = rng.choices(vocab, weights, k=length)
    return docs


@settings(max_examples=120, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    size=st.integers(0, 400),
    k=st.integers(0, 30),
    query=st.lists(st.integers(0, 59) | st.integers(0, 6), min_size=1, max_size=6),
    excluded=st.lists(st.integers(0, 399), max_size=6),
)
def test_top_k_is_the_plain_walk(
    seed: int, size: int, k: int, query: list[int], excluded: list[int]
) -> None:
    """The pruned search's every output (the k, their scores, the bounds and their order,
    the exact scores it kept, the walked terms) is the plain walk's: its thresholds from
    the best of the partials above a bound, its pool summed best partial first, a term at
    a time, only while a document can still reach the k-th."""
    docs = zipf_corpus(seed, size)
    index = Bm25Index()
    for doc_id, terms in docs.items():
        index.add(doc_id, terms)
    words = [f"w{i}" for i in query]
    exclude = frozenset(f"d{i:04d}" for i in excluded)
    saved, share = bm25._POOL_CHUNK, bm25._POOL_MAP_SHARE
    try:
        # the pool summed in small steps; then from the caches; its terms' contributions
        # looked up one document at a time, or from maps built at the first lookup
        for chunk, maps in ((saved, share), (1, share), (saved, share), (1, 0), (1, 1 << 30)):
            bm25._POOL_CHUNK, bm25._POOL_MAP_SHARE = chunk, maps
            got = index.top_k(words, k, exclude=exclude)
            want = plain_top_k(index, words, k, exclude)
            assert list(got.scores.items()) == list(want.scores.items())
            assert got.complete == want.complete
            assert list(got.lower.items()) == list(want.lower.items())
            assert got.known == want.known
            assert got.walked == want.walked
            assert got.count_at_least(0.5, exclude) == want.count_at_least(0.5, exclude)
    finally:
        bm25._POOL_CHUNK, bm25._POOL_MAP_SHARE = saved, share
