"""The watcher's debounce: one reload per path once it has been quiet for the delay, timed
by a fake clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from mnemod.clock import FixedClock
from mnemod.runtime.commands import Command
from mnemod.runtime.watcher import Debouncer


def test_a_path_is_posted_once_it_was_quiet_for_the_delay() -> None:
    clock = FixedClock()
    posted: list[Command] = []
    debouncer = Debouncer(0.3, posted.append, clock)
    l1, l2 = Path("l1/team.toml"), Path("l2/preference.md")
    debouncer.touch("reload_l1", l1)
    assert debouncer.post_due() == pytest.approx(0.3) and posted == []
    clock.advance(0.2)
    debouncer.touch("reload_l1", l1)  # news: its quiet time starts again
    debouncer.touch("reload_l2", l2)
    clock.advance(0.2)
    assert debouncer.post_due() == pytest.approx(0.1) and posted == []
    clock.advance(0.1)
    assert debouncer.post_due() is None
    assert posted == [Command("reload_l1", l1), Command("reload_l2", l2)]
    assert debouncer.post_due() is None and len(posted) == 2  # each once
