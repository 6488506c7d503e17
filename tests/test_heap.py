"""The collector pause around loading leaves the collector as the application had it."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from mnemod.store.heap import collector_paused


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
