"""The engine's indexes over every entry, built after open rather than in it.

Opening a namespace reads its entries; the dedup postings (store.lookup) and resolve's view
with its BM25 index (store.recall) took two thirds of an open at 100,000 entries (6 of 9 s),
and a reader that only lists or gets entries never uses them. They are built when first
needed (the first add needs the postings, the first resolve the view) or ahead of that in
slices (`warm`: the daemon runs one whenever no request waits, so it serves from its first
second).

While the view is being built, an entry not yet fed to it is fed later as it is then, in
the order a build at open would feed it (the L3 entries in their order, then the L2
entries, then the L1 items), so resolve ranks exactly as on a store opened at that moment.
The postings do not depend on order: each entry is indexed once, as it is when reached or
when it changes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import structlog

from mnemod.files.l1_files import L1Item
from mnemod.store.commits import State
from mnemod.store.lookup import Lookup
from mnemod.store.recall import Recall
from mnemod.tokens import TokenCounter

log = structlog.get_logger("mnemod.warming")
_CHECK_EVERY = 64  # entries between two looks at the clock


class Indexes:
    """The lookups and resolve's view of one engine's state, built lazily or in slices."""

    def __init__(
        self, state: State, counter: TokenCounter, l1_items: Callable[[], list[L1Item]]
    ) -> None:
        self.state = state
        self.counter = counter
        self.l1_items = l1_items
        self.lookup = Lookup(words=False)
        for entry in state.entries.values():
            self.lookup.add(entry)  # key labels and merge aliases only: find needs them now
        self._recall: Recall | None = None
        self._feed: list[str] = []  # ids for the view, in the order a build at open feeds
        self._fed = 0
        self._waiting: set[str] = set()  # in `_feed` past `_fed`, still to be fed
        self._postings = False  # every entry's words are indexed
        self._words: list[str] | None = None  # L3 ids whose words are not indexed yet
        self._started = 0.0

    # ---- state ---------------------------------------------------------------------------
    @property
    def cold(self) -> bool:
        """Something is still to be built."""
        return not self._postings or self._recall is None or bool(self._waiting)

    @property
    def recall_built(self) -> bool:
        """Resolve's view is complete: `recall` returns it at once."""
        return self._recall is not None and not self._waiting

    @property
    def postings_built(self) -> bool:
        """Every entry's words are indexed: `postings_ready` returns at once."""
        return self._postings

    @property
    def recall(self) -> Recall:
        """Resolve's view, complete (built now if it was not)."""
        self._build_recall(math.inf)
        assert self._recall is not None
        return self._recall

    def postings_ready(self) -> Lookup:
        """The lookup with every entry's words indexed (built now if they were not)."""
        self._build_postings(math.inf)
        return self.lookup

    def warm(self, seconds: float) -> None:
        """Build for about `seconds`: the postings first (an add needs them), then the view."""
        deadline = time.perf_counter() + seconds
        if not self._started:
            self._started = time.perf_counter()
        if not self._build_postings(deadline):
            return
        if self._build_recall(deadline):
            self._finished()

    # ---- changes -------------------------------------------------------------------------
    def touched(self, entry_id: str, op: str) -> None:
        """An entry changed (or left, or arrived): bring the view up to date, or leave it to
        the build when the entry waits for it."""
        recall = self._recall
        if recall is None:
            return
        if self._waiting:
            if entry_id in self._waiting:
                return  # fed later, as it is then
            if entry_id not in recall.resolver:
                if entry_id in self.state.entries or entry_id in self.state.l2:
                    self._feed.append(entry_id)  # new: after every entry of the open
                    self._waiting.add(entry_id)
                return
        entry = self.state.entries.get(entry_id)
        layer = "l3"
        if entry is None:
            entry, layer = self.state.l2.get(entry_id), "l2"
        if entry is None or op == "remove":  # a removal is noted before the entry leaves
            recall.drop(entry_id)
        elif op == "access":
            recall.accessed(entry, layer)
        else:
            recall.put(entry, layer)

    def sync_l1(self) -> None:
        """The L1 items changed: the view takes them (a view still being built takes them
        at its end)."""
        if self._recall is not None and not self._waiting:
            self._recall.sync_l1(self.l1_items())

    # ---- building ------------------------------------------------------------------------
    def _build_postings(self, deadline: float) -> bool:
        """Index words until `deadline`; True when every entry's are."""
        lookup = self.lookup
        if self._postings:
            return True
        if self._words is None:
            self._words = list(self.state.entries)
            lookup.words = True  # what is added from now on is indexed at once
        entries, words = self.state.entries, self._words
        while words:
            for _ in range(min(_CHECK_EVERY, len(words))):
                entry = entries.get(words.pop())
                if entry is not None and not lookup.has_words(entry.id):
                    lookup.add_words(entry)
            if time.perf_counter() >= deadline:
                return False
        self._postings = True
        self._words = None
        return True

    def _build_recall(self, deadline: float) -> bool:
        """Feed the view until `deadline`; True when it is complete."""
        if self._recall is None:
            self._recall = Recall(self.counter)
            self._feed = [*self.state.entries, *self.state.l2]
            self._waiting = set(self._feed)
            self._fed = 0
        elif not self._waiting:
            return True
        recall, feed, waiting = self._recall, self._feed, self._waiting
        entries, l2 = self.state.entries, self.state.l2
        while self._fed < len(feed):
            stop = min(len(feed), self._fed + _CHECK_EVERY)
            for entry_id in feed[self._fed : stop]:
                if entry_id not in waiting:
                    continue  # left meanwhile
                waiting.discard(entry_id)
                entry = entries.get(entry_id)
                if entry is not None:
                    recall.put(entry, "l3")
                elif entry_id in l2:
                    recall.put(l2[entry_id], "l2")
            self._fed = stop
            if time.perf_counter() >= deadline and self._fed < len(feed):
                return False
        waiting.clear()
        self._feed = []
        recall.sync_l1(self.l1_items())
        return True

    def _finished(self) -> None:
        if self._started:
            seconds = round(time.perf_counter() - self._started, 3)
            log.info("engine.warmed", entries=len(self.state.entries), seconds=seconds)
            self._started = 0.0
