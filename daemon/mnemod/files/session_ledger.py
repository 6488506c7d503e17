"""Which `once` items a session was given, kept on disk for the Claude Code hook when no
daemon keeps that ledger in Redis (docs/files.md).

One small JSON file per session under `<namespace>/hook/sessions/`, named by a hash of the
session id and replaced atomically, so two sessions never write the same file. A session's
file is forgotten `SESSION_TTL_SECONDS` after its last write (as the daemon's Redis set
expires), and at most `MAX_SESSIONS` files are kept: the oldest go first.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from mnemod.files.atomic import atomic_write_text

SESSION_TTL_SECONDS = 24 * 3600
MAX_SESSIONS = 200
MAX_IDS = 1000  # ids kept per session (an L1 folder of `once` items is far smaller)
FORMAT = "mnemod.session/1"


class SessionLedger:
    """The `once` ids given per session, in `folder` (created on the first write)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def path(self, session: str) -> Path:
        digest = hashlib.sha256(session.encode("utf-8", "surrogatepass")).hexdigest()[:32]
        return self.folder / f"{digest}.json"

    def seen(self, session: str, now: float) -> set[str]:
        """The ids given in `session` (wall-clock seconds `now`); an expired, unreadable or
        foreign file counts as a new session."""
        path = self.path(session)
        try:
            if path.stat().st_mtime < now - SESSION_TTL_SECONDS:
                return set()
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return set()
        if not isinstance(data, dict) or data.get("session") != session:
            return set()
        ids = data.get("once_ids")
        return {i for i in ids if isinstance(i, str)} if isinstance(ids, list) else set()

    def remember(self, session: str, ids: set[str] | list[str], now: float) -> None:
        """Add `ids` to the session's ledger, then forget expired and surplus sessions."""
        if not ids:
            return
        merged = sorted(self.seen(session, now) | set(ids))[-MAX_IDS:]
        body = {"format": FORMAT, "session": session, "once_ids": merged}
        path = self.path(session)
        atomic_write_text(path, json.dumps(body, ensure_ascii=False) + "\n")
        os.utime(path, (now, now))  # the last write, on the clock the caller reads
        self.prune(now)

    def prune(self, now: float) -> int:
        """Remove expired session files and the oldest beyond MAX_SESSIONS; how many went."""
        try:
            files = [(p.stat().st_mtime, p) for p in self.folder.glob("*.json")]
        except OSError:
            return 0
        files.sort()
        expired = [p for mtime, p in files if mtime < now - SESSION_TTL_SECONDS]
        kept = [p for mtime, p in files if mtime >= now - SESSION_TTL_SECONDS]
        surplus = kept[: max(0, len(kept) - MAX_SESSIONS)]
        removed = 0
        for path in [*expired, *surplus]:
            try:
                path.unlink()
                removed += 1
            except FileNotFoundError:
                pass
        return removed
