"""An incremental BM25 index: add, remove and update documents without a rebuild.

Postings are `term → {doc id → term frequency}`; document lengths, document frequencies
(the size of each posting list) and the total length (for avgdl) are kept up to date on
every change. `scores()` walks only the posting lists of the query terms, so its cost
follows how common the query terms are, not the size of the corpus.

IDF is the non-negative Lucene form, log(1 + (N − df + 0.5) / (df + 0.5)).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Bm25Params:
    """k1 saturates term frequency; b sets how much long documents are penalised."""

    k1: float = 1.2
    b: float = 0.75


class Bm25Index:
    """Documents are lists of terms keyed by an id; re-adding an id replaces it."""

    def __init__(self, params: Bm25Params | None = None) -> None:
        self.params = params or Bm25Params()
        self._postings: dict[str, dict[str, int]] = {}
        self._doc_terms: dict[str, Counter[str]] = {}
        self._doc_len: dict[str, int] = {}
        self._total_len = 0

    def __len__(self) -> int:
        return len(self._doc_len)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._doc_len

    @property
    def avgdl(self) -> float:
        return self._total_len / len(self._doc_len) if self._doc_len else 0.0

    def doc_len(self, doc_id: str) -> int:
        return self._doc_len.get(doc_id, 0)

    def df(self, term: str) -> int:
        return len(self._postings.get(term, ()))

    def add(self, doc_id: str, terms: Iterable[str]) -> None:
        """Index `terms` under `doc_id`, replacing what was there (so add is also update)."""
        if doc_id in self._doc_len:
            self.remove(doc_id)
        counts = Counter(terms)
        length = sum(counts.values())
        self._doc_terms[doc_id] = counts
        self._doc_len[doc_id] = length
        self._total_len += length
        for term, tf in counts.items():
            self._postings.setdefault(term, {})[doc_id] = tf

    def update(self, doc_id: str, terms: Iterable[str]) -> None:
        self.add(doc_id, terms)

    def remove(self, doc_id: str) -> bool:
        """Forget `doc_id`; False when it was not indexed."""
        counts = self._doc_terms.pop(doc_id, None)
        if counts is None:
            return False
        self._total_len -= self._doc_len.pop(doc_id)
        for term in counts:
            posting = self._postings[term]
            del posting[doc_id]
            if not posting:
                del self._postings[term]
        return True

    def idf(self, term: str) -> float:
        df = self.df(term)
        if df == 0:
            return 0.0
        n = len(self._doc_len)
        return math.log(1.0 + (n - df + 0.5) / (df + 0.5))

    def term_scores(self, term: str) -> dict[str, float]:
        """The BM25 contribution of one term to every document that holds it."""
        posting = self._postings.get(term)
        if not posting:
            return {}
        idf = self.idf(term)
        k1, b = self.params.k1, self.params.b
        avgdl = self.avgdl or 1.0
        out: dict[str, float] = {}
        for doc_id, tf in posting.items():
            norm = k1 * (1.0 - b + b * self._doc_len[doc_id] / avgdl)
            out[doc_id] = idf * tf * (k1 + 1.0) / (tf + norm)
        return out

    def scores(self, query_terms: Iterable[str]) -> dict[str, float]:
        """BM25 of every document sharing a term with the query (each distinct term once)."""
        total: dict[str, float] = {}
        k1, b = self.params.k1, self.params.b
        avgdl = self.avgdl or 1.0
        doc_len = self._doc_len
        get = total.get
        for term in dict.fromkeys(query_terms):  # term_scores inlined: the hot loop of resolve
            posting = self._postings.get(term)
            if not posting:
                continue
            idf = self.idf(term)
            for doc_id, tf in posting.items():
                norm = k1 * (1.0 - b + b * doc_len[doc_id] / avgdl)
                total[doc_id] = get(doc_id, 0.0) + idf * tf * (k1 + 1.0) / (tf + norm)
        return total
