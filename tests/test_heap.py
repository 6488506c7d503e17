"""The collector pause around loading leaves the collector as the application had it; the
daemon keeps its threads to one malloc arena and hands freed memory back."""

from __future__ import annotations

import gc
import platform
import subprocess
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


GLIBC = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="glibc's malloc",
)


@GLIBC
def test_a_daemon_keeps_its_threads_to_one_malloc_arena(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert one_malloc_arena()
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")  # a person's own setting is left as it is
    assert not one_malloc_arena()


FREED_IN_THE_MIDDLE = """
from mnemod.store.heap import release_free_memory
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) // 1024
held = [bytearray(60_000) for _ in range(2000)]  # 120 MB of malloc's heap, not mmap's
last = bytearray(60_000)  # keeps what is freed below it in the middle of the heap
del held
before = rss()
assert release_free_memory()
print(before, rss())
"""


@GLIBC
@pytest.mark.process
def test_memory_freed_in_the_middle_of_the_heap_goes_back_to_the_system() -> None:
    done = subprocess.run(
        [sys.executable, "-c", FREED_IN_THE_MIDDLE], capture_output=True, text=True, check=True
    )
    before, after = map(int, done.stdout.split())
    assert before - after >= 100, (before, after)  # MB
