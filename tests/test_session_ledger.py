"""The hook's per-session `once` ledger on disk: kept per session, forgotten a day after its
last write, at most MAX_SESSIONS sessions kept, a broken file read as a new session."""

from __future__ import annotations

import os
import time
from pathlib import Path

from mnemod.files.session_ledger import MAX_SESSIONS, SESSION_TTL_SECONDS, SessionLedger


def test_sessions_are_kept_apart_and_merged(tmp_path: Path) -> None:
    ledger = SessionLedger(tmp_path / "sessions")
    now = time.time()
    assert ledger.seen("a", now) == set()
    ledger.remember("a", ["x"], now)
    ledger.remember("a", ["y"], now)
    ledger.remember("b/../../c", ["z"], now)  # any session id: the file name is a hash
    assert ledger.seen("a", now) == {"x", "y"}
    assert ledger.seen("b/../../c", now) == {"z"}
    assert sorted(p.parent for p in tmp_path.rglob("*.json")) == [tmp_path / "sessions"] * 2


def test_a_session_expires_a_day_after_its_last_write(tmp_path: Path) -> None:
    ledger = SessionLedger(tmp_path)
    now = time.time()
    ledger.remember("a", ["x"], now)
    assert ledger.seen("a", now + SESSION_TTL_SECONDS - 60) == {"x"}
    assert ledger.seen("a", now + SESSION_TTL_SECONDS + 60) == set()
    ledger.remember("b", ["y"], now + SESSION_TTL_SECONDS + 60)  # pruning removes a's file
    assert not ledger.path("a").exists() and ledger.path("b").exists()


def test_at_most_max_sessions_are_kept_the_oldest_go(tmp_path: Path) -> None:
    ledger = SessionLedger(tmp_path)
    now = time.time()
    for n in range(MAX_SESSIONS + 5):
        ledger.remember(f"s{n}", ["x"], now)
        os.utime(ledger.path(f"s{n}"), (now - 1000 + n, now - 1000 + n))
    ledger.prune(now)
    assert len(list(tmp_path.glob("*.json"))) == MAX_SESSIONS
    assert not ledger.path("s0").exists() and ledger.path(f"s{MAX_SESSIONS + 4}").exists()


def test_a_broken_or_foreign_file_is_a_new_session(tmp_path: Path) -> None:
    ledger = SessionLedger(tmp_path)
    now = time.time()
    ledger.path("a").write_text("{half")
    assert ledger.seen("a", now) == set()
    ledger.path("b").write_text('{"session": "other", "once_ids": ["x"]}')
    assert ledger.seen("b", now) == set()
    ledger.remember("a", ["y"], now)
    assert ledger.seen("a", now) == {"y"}
