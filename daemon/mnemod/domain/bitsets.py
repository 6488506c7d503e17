"""Sets of small integers as Python ints (bit i set: i is a member), for counting in C.

A union, an intersection or a symmetric difference of two such sets is one operation over
machine words, where the same on `set` objects visits every member: the dedup lookup
(store.lookup) counts, over a few thousand entries of one keyword-set size, in how many of
a new text's words each entry appears, with a few dozen of these operations.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

_NONZERO = re.compile(rb"[^\x00]")
# the positions of the bits set in each byte value, lowest first
_BYTE_BITS = tuple(tuple(i for i in range(8) if value >> i & 1) for value in range(256))


def members(bits: int) -> list[int]:
    """The members of `bits` (≥ 0), in increasing order: the zero bytes are skipped in C."""
    if not bits:
        return []
    data = bits.to_bytes((bits.bit_length() + 7) // 8, "little")
    out: list[int] = []
    extend = out.extend
    for found in _NONZERO.finditer(data):
        at = found.start()
        base = at * 8
        extend([base + i for i in _BYTE_BITS[data[at]]])
    return out


def from_members(slots: Iterable[int]) -> int:
    """The set holding `slots` (an or of single bits: in place, 1.4 times faster than
    `functools.reduce` over them)."""
    out = 0
    for slot in slots:
        out |= 1 << slot
    return out


def counted(sets: Iterable[int], planes: list[int] | None = None) -> list[int]:
    """How many of `sets` hold each member, in binary across bit planes (plane k holds the
    members whose count has bit k set), added to `planes` (changed in place) when given:
    adding a set costs a few operations however many sets there are (a ripple-carry adder
    run on every member at once)."""
    planes = [] if planes is None else planes
    for carry in sets:
        for k, plane in enumerate(planes):
            planes[k] = plane ^ carry
            carry &= plane
            if not carry:
                break
        else:
            if carry:
                planes.append(carry)
    return planes


def summed(sets: Iterable[int]) -> list[int]:
    """`counted(sets)` from scratch, the four lowest planes held in local names (no list
    indexing, no loop over the planes): counts of 16 and more carry into the planes above,
    counted once at the end."""
    p0 = p1 = p2 = p3 = 0
    high: list[int] = []
    for carry in sets:
        carry, p0 = p0 & carry, p0 ^ carry
        if carry:
            carry, p1 = p1 & carry, p1 ^ carry
            if carry:
                carry, p2 = p2 & carry, p2 ^ carry
                if carry:
                    carry, p3 = p3 & carry, p3 ^ carry
                    if carry:
                        high.append(carry)
    planes = [p0, p1, p2, p3]
    if high:
        planes.extend(counted(high))
    while planes and not planes[-1]:
        planes.pop()
    return planes


def reaching(planes: Sequence[int], needed: int) -> int:
    """The members whose count in `planes` (`counted`) is at least `needed` (≥ 1): greater
    at the first plane, from the top, where the two differ, or equal throughout."""
    if needed >> len(planes):
        return 0
    greater, equal = 0, -1
    for k in range(len(planes) - 1, -1, -1):
        if needed >> k & 1:
            equal &= planes[k]
        else:
            greater |= equal & planes[k]
    return greater | equal


def held_by(bitmaps: Sequence[int], lists: Sequence[Sequence[int]], needed: int) -> list[int]:
    """The members held by at least `needed` (≥ 1) of `bitmaps` and `lists` (short sets
    given as their members), in increasing order.

    A list is made a bitmap member by member, in Python: the dearest part of the count.
    So the bitmaps are counted first, then the lists, shortest first, each only while
    some member could still reach `needed` were it in every list left: often none can,
    and the longer lists are never read."""
    needed = max(1, needed)
    planes = summed(bitmaps)
    left = len(lists)
    for each in sorted(lists, key=len):
        lowest = needed - left
        if lowest >= 1 and not reaching(planes, lowest):
            return []
        counted((from_members(each),), planes)
        left -= 1
    return members(reaching(planes, needed))
