"""Reading stored entries: the fast reader of entries as mnemod writes them reads each to
the same entry as the strict reader, and refuses (hands over) everything else."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mnemod.domain import model
from mnemod.domain.model import Entry
from mnemod.errors import InvalidInputError

WRITTEN = Entry(
    id="01M8KG8M5BMQT262PANT9HMWWS",
    type="preference",
    content="User prefers Asia/Taipei",
    created_at=datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=UTC),
    updated_at=datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=UTC),
    last_accessed_at=datetime(2026, 1, 3, tzinfo=UTC),
    expires_at=datetime(2026, 2, 3, tzinfo=UTC),
    keywords=("user", "prefer", "asia", "taipei"),
    tags=("tz",),
    merged_from=("01M8KG8M5BMQT262PANT9HMWWT",),
).to_dict()

ODD_VALUES: list[Any] = [
    None, "", " ", "x", "hot", "2026-01-02T03:04:05.006Z", "2026-01-02T03:04:05.006123Z",
    "2026-01-02T04:04:05+01:00", "2026-01-02T03:04:05", " 2026-01-02T03:04:05.006Z ",
    0, 1, 3, 6, -1, True, False, 2.5, [], ["a"], ["a", 1], [""], "a" * 70, {}, "01M8?",
]  # fmt: skip


def outcome(read: Any, data: dict[str, Any]) -> Any:
    try:
        return read(data)
    except InvalidInputError as exc:
        return ("refused", exc.field)


@settings(max_examples=400, deadline=None)
@given(
    # "other": a field mnemod does not write, in place of a dropped one or beside them all
    st.dictionaries(
        st.sampled_from([*sorted(WRITTEN), "other"]), st.sampled_from(ODD_VALUES), max_size=3
    ),
    st.sets(st.sampled_from(sorted(WRITTEN)), max_size=2),
)
def test_both_readers_agree(changed: dict[str, Any], dropped: set[str]) -> None:
    data = {k: v for k, v in {**WRITTEN, **changed}.items() if k not in dropped}
    fast = model._read_written(data)
    strict = outcome(lambda d: model._read_strictly(d, ""), data)
    if fast is not None:
        assert fast == strict
    assert outcome(Entry.from_dict, data) == strict


def test_an_entry_as_written_is_read_fast_with_shared_times() -> None:
    entry = model._read_written(dict(WRITTEN))
    assert entry is not None and entry.to_dict() == WRITTEN
    assert entry.updated_at is entry.created_at  # one datetime for the equal times
    updated = {**WRITTEN, "updated_at": "2026-01-05T00:00:00.000Z"}
    updated["last_accessed_at"] = WRITTEN["created_at"]  # updated, never accessed
    entry = model._read_written(updated)
    assert entry is not None and entry.to_dict() == updated
    assert entry.last_accessed_at is entry.created_at


@pytest.mark.parametrize("value", ["2026-01-02T04:04:05+01:00", "2026-01-02T03:04:05"])
def test_other_zones_and_naive_times_go_to_the_strict_reader(value: str) -> None:
    data = {**WRITTEN, "created_at": value}
    assert model._read_written(data) is None
    assert Entry.from_dict(data).created_at == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
