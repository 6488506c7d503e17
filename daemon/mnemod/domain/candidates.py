"""What resolve knows of a memory: an L1 item, an L2 or an L3 entry as one `Candidate`."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal, Protocol

from mnemod.domain.model import Entry

Layer = Literal["l1", "l2", "l3"]


@dataclass(frozen=True, slots=True)
class Candidate:
    """What resolve needs to know of one memory (L1 item, L2 or L3 entry)."""

    id: str
    layer: Layer
    type: str
    content: str
    created_at: datetime
    # read only while access_count > 0 (frecency), and kept current only then: the accesses
    # that are a resolve's own selections leave the candidate as it was (`Resolver.accessed`)
    last_accessed_at: datetime
    key: str | None = None
    tokens: int = 0
    importance: int = 3
    tier: str = "cold"
    triggers: tuple[str, ...] = ()
    once: bool = False
    access_count: int = 0
    merged_from: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    # kept by the Resolver that holds the candidate, left out of equality: its place among
    # the L3 items created at the same moment (`Resolver._next_seq`), and what it learnt of
    # the content (see `remember`)
    seq: int = field(default=0, compare=False)
    timed: bool | None = field(default=None, compare=False)
    asking: bool | None = field(default=None, compare=False)

    def remember(self, name: str, value: bool) -> bool:
        """Keep `value`, a pure function of the (immutable) content, in field `name`: the
        candidate stays equal and any holder computes the same value, so caching it here
        is as safe as a dict beside it, and costs no entry per memory."""
        object.__setattr__(self, name, value)
        return value

    @property
    def hot(self) -> bool:
        return self.tier == "hot" or (self.layer == "l1" and not self.triggers)


def candidate_from_entry(entry: Entry, layer: Layer = "l3") -> Candidate:
    return Candidate(
        id=entry.id,
        layer=layer,
        type=entry.type,
        content=entry.content,
        created_at=entry.created_at,
        last_accessed_at=entry.last_accessed_at,
        key=entry.key,
        tokens=entry.tokens,
        importance=entry.importance,
        tier=entry.tier,
        triggers=tuple(entry.triggers),
        once=entry.once,
        access_count=deliberate_accesses(entry),
        merged_from=tuple(entry.merged_from),
        tags=tuple(entry.tags),
    )


def deliberate_accesses(entry: Entry) -> int:
    """The accesses that are evidence of relevance: a memory that resolve picked before is
    not more relevant now (else access feedback would take over ranking)."""
    return entry.access_count - entry.selected_count


class StandingItem(Protocol):
    """What resolve reads of an L1 item (files.l1_files.L1Item fits)."""

    @property
    def id(self) -> str: ...
    @property
    def content(self) -> str: ...
    @property
    def triggers(self) -> tuple[str, ...]: ...
    @property
    def once(self) -> bool: ...
    @property
    def tags(self) -> tuple[str, ...]: ...
    @property
    def importance(self) -> int: ...


L1_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)  # L1 items have no dates; they are shown undated


def candidate_from_l1(item: StandingItem) -> Candidate:
    """An L1 item: hot (always) without triggers, warm with them."""
    return Candidate(
        id=item.id,
        layer="l1",
        type="l1",
        content=item.content,
        created_at=L1_EPOCH,
        last_accessed_at=L1_EPOCH,
        importance=item.importance,
        tier="warm" if item.triggers else "hot",
        triggers=tuple(item.triggers),
        once=item.once,
        tags=tuple(item.tags),
    )
