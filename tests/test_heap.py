"""The collector pause around loading leaves the collector as the application had it; the
daemon keeps its threads to one malloc arena."""

from __future__ import annotations

import gc
import platform
import sys
from collections.abc import Iterator

import pytest

from mnemod.store.heap import collector_paused, one_malloc_arena


@pytest.fixture
def collector_state() -> Iterator[None]:
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


@pytest.mark.usefixtures("collector_state")
@pytest.mark.parametrize("enabled", [True, False])
def test_collector_is_paused_inside_and_restored_after(enabled: bool) -> None:
    (gc.enable if enabled else gc.disable)()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled() is enabled


@pytest.mark.usefixtures("collector_state")
def test_collector_is_restored_when_loading_fails() -> None:
    gc.enable()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("corrupt index")
    assert gc.isenabled()


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="glibc's malloc arenas",
)
def test_a_daemon_keeps_its_threads_to_one_malloc_arena(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert one_malloc_arena()
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")  # a person's own setting is left as it is
    assert not one_malloc_arena()
