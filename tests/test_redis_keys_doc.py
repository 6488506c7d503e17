"""docs/redis-keys.md's key table must list exactly the keys keys.py builds, with their types."""

from __future__ import annotations

import re
from pathlib import Path

from mnemod.redisio.keys import GROUP, Keys, daemons_key

DOC = Path(__file__).resolve().parent.parent / "docs" / "redis-keys.md"


def documented() -> dict[str, str]:
    """`key pattern → type` from the table under `## Keys`."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Keys", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        match = re.match(r"\|\s*`([^`]+)`\s*\|\s*([^|]+?)\s*\|", line)
        if match:
            assert match.group(1) not in rows, f"{match.group(1)} documented twice"
            rows[match.group(1)] = match.group(2)
    return rows


def built() -> dict[str, str]:
    keys = Keys("mnemod", "ns")
    return {
        keys.events: "stream",
        keys.dead: "stream",
        keys.item("<id>"): "hash",
        keys.hot: "sorted set",
        keys.l1: "sorted set",
        keys.l2: "sorted set",
        keys.key("<key>"): "string",
        keys.rpc: "stream",
        keys.reply("<token>"): "list",
        keys.changes: "pub/sub channel",
        keys.status: "hash",
        keys.lease: "string",
        keys.standby: "sorted set",
        daemons_key("mnemod"): "sorted set",
        keys.sessions("<session>"): "set",
        keys.marker: "string",
        keys.feed: "stream",
        keys.committed: "hash",
        keys.checkpoint: "hash",
        keys.feed_staged: "list",
        keys.checkpoint_staged: "list",
        keys.followers: "hash",
    }


def test_doc_table_matches_keys_module() -> None:
    assert documented() == built()


def test_doc_names_the_group() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert f"consumer group `{GROUP}`" in text


def test_doc_examples_use_documented_keys() -> None:
    """Every key quoted in an example matches a table row (placeholders as wildcards)."""
    patterns = []
    for pattern in built():
        regex = re.escape(pattern.replace("{ns}", "{default}"))
        for placeholder in ("<id>", "<term>", "<key>", "<token>", "<session>"):
            regex = regex.replace(re.escape(placeholder), ".+")
        patterns.append(re.compile(regex))
    text = DOC.read_text(encoding="utf-8")
    used = re.findall(r"'(mnemod:\{default\}:[^']+)'", text)
    assert used
    for name in used:
        assert any(p.fullmatch(name) for p in patterns), name
