"""examples/cli-session.sh, the scripted tour of the engine, runs and shows what it claims."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.process  # starts processes of its own

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.timeout(300)  # some 70 CLI runs: 20 s on an idle machine, 90 on a busy one
def test_the_scripted_session_shows_every_behaviour(tmp_path: Path) -> None:
    mnemod = shutil.which("mnemod", path=str(Path(sys.executable).parent))
    assert mnemod is not None
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOD_")}
    env["TMPDIR"] = str(tmp_path)
    done = subprocess.run(
        ["bash", str(ROOT / "examples" / "cli-session.sh"), mnemod],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "context    importance 3 → expires 2026-03-15T09:00:00.000Z" in out
    assert "preference importance 5 → expires 2026-04-30T09:00:00.000Z" in out
    assert "after 12 accesses: expires 2026-05-30T09:00:00.000Z" in out  # the 90-day cap
    assert "one entry:" in out and "'User likes TypeScript a lot'" in out
    assert "archived: Sprint 12 is half done | expired at" in out
    assert "merged=1 kept=2" in out
    assert "layer: l2" in out and "expires_at: null" in out
    assert 'exit code 1; file still: {"format": "mnemod.l3/1", "entries": [' in out
