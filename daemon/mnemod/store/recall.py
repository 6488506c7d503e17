"""The engine's view for resolve: every L1 item and L2/L3 entry as a resolve candidate, and
the library's own `once` ledger per session (the daemon keeps that ledger in Redis)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime

from mnemod.domain.candidates import (
    Candidate,
    candidate_from_entry,
    candidate_from_l1,
    deliberate_accesses,
)
from mnemod.domain.model import Entry
from mnemod.domain.resolve import Resolver, ResolveResult
from mnemod.files.l1_files import L1Item
from mnemod.tokens import TokenCounter


class Recall:
    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self.resolver = Resolver(counter)
        self.sessions: dict[str, set[str]] = defaultdict(set)
        self._l1_ids: set[str] = set()

    def put(self, entry: Entry, layer: str) -> None:
        self.resolver.upsert(candidate_from_entry(entry, "l2" if layer == "l2" else "l3"))

    def accessed(self, entry: Entry, layer: str) -> None:
        """Only the entry's access fields changed."""
        if not self.resolver.accessed(entry.id, deliberate_accesses(entry), entry.last_accessed_at):
            self.put(entry, layer)

    def drop(self, entry_id: str) -> None:
        self.resolver.remove(entry_id)

    def sync_l1(self, items: Iterable[L1Item]) -> None:
        listed = list(items)
        wanted = {item.id for item in listed}
        for stale in self._l1_ids - wanted:
            self.resolver.remove(stale)
        for item in listed:
            self.resolver.upsert(self._l1_candidate(item))
        self._l1_ids = wanted

    def resolve(
        self,
        prompt: str,
        budget: int,
        now: datetime,
        session: str | None,
        seen_once: set[str] | None,
        trace: bool,
    ) -> ResolveResult:
        """`seen_once` from the caller (the daemon's Redis ledger) wins over the session's
        own ledger, which is then left alone."""
        own = seen_once is None
        seen = self.sessions[session] if own and session else (seen_once or set())
        result = self.resolver.resolve(prompt, budget, now, seen_once=seen, trace=trace)
        if own and session:
            self.sessions[session].update(result.once_ids)
        return result

    def _l1_candidate(self, item: L1Item) -> Candidate:
        return replace(candidate_from_l1(item), tokens=self.counter.count(item.content))
