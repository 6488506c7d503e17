"""A daemon starts from the entries cache beside the checkpoint, and from index.json when
the cache is damaged: the same entries either way, in the hot layer it rebuilds."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

import mnemod
from daemon_proc import KEYS, DaemonFactory
from mnemod.files.entries_cache import cache_path

pytestmark = pytest.mark.process


def made_store(data: Path) -> tuple[Path, set[str]]:
    """Entries checkpointed by a store's close; its index.json and their ids."""
    store = mnemod.open(data)
    texts = ["The cat is named Miso", "Deploys are on Tuesday", "The VPN is wg0",
             "Lunch is at noon", "The printer is on floor 2"]  # fmt: skip
    ids = {store.add(text, type="context").id for text in texts}
    index = store.engine.paths.index
    store.close()
    return index, ids


@pytest.mark.parametrize("damage", [False, True])
def test_a_start_reads_the_entries_from_the_cache_or_the_json(
    daemons: DaemonFactory, damage: bool
) -> None:
    data = daemons.data_dir()
    index, ids = made_store(data)
    cache = cache_path(index)
    assert cache.exists()
    if damage:
        blob = bytearray(cache.read_bytes())
        blob[len(blob) // 2] ^= 0x40
        cache.write_bytes(bytes(blob))
    proc = daemons.daemon(data).start()
    client = daemons.client(proc.url_from_stdout())
    proc.wait_log("daemon.running")
    assert set(client.zrange(KEYS.hot, 0, -1)) == ids
    proc.signal(signal.SIGTERM)
    assert proc.wait_exit(timeout=30) == 0
