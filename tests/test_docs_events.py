"""The log events docs/operations.md lists are part of the interface (people alert on
them): each must be one the code emits, under that exact name."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def documented_events() -> list[str]:
    text = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    table = re.search(r"\| event \| meaning \|\n\|---\|---\|\n((?:\|.*\n)+)", text)
    assert table is not None, "docs/operations.md lost its table of log events"
    names: list[str] = []
    for row in table.group(1).splitlines():
        first = row.split("|")[1]
        names += re.findall(r"`([a-z0-9_]+(?:\.[a-z0-9_]+)+)`", first)
    return names


def test_every_log_event_the_docs_name_is_emitted_by_the_code() -> None:
    source = "\n".join(
        path.read_text(encoding="utf-8") for path in (ROOT / "daemon" / "mnemod").rglob("*.py")
    )
    names = documented_events()
    assert len(names) > 20
    missing = [name for name in names if f'"{name}"' not in source]
    assert not missing, f"documented but never logged under that name: {missing}"
