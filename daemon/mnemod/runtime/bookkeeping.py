"""What answered requests leave for later: the accesses of what they selected, gathered
for a snapshot interval and then sealed, recorded (each entry's at once, however often it
was selected), brought into the hot layer, and the entries serialized again for the next
snapshot. The changes agents make leave the last two as well. And what an open leaves for
later: the engine's indexes (store.warming).

The writer runs it while no request waits, a slice at a time, so a request that arrives
meanwhile waits for one slice at most. Done at each snapshot instead, it stalled a request
for 0.1-0.6 s every 2 s; done per request, it cost about 1 ms a request at 10k entries
and 1,000 tokens.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Protocol

from mnemod.runtime.hot_sync import HotSync
from mnemod.store.engine import Engine
from mnemod.store.heap import freeze_heap, release_free_memory

SLICE_SECONDS = 0.002  # one slice while no request waits
CATCH_UP_SECONDS = 0.001  # one slice after a batch, under a load that never pauses
STARVED_SECONDS = 0.25  # ... once none was done for this long
ACCESS_CHUNK = 32  # entries recorded, or brought into the hot layer, per step of a slice


class Settler(Protocol):
    """Gathers what answered requests selected (rpc_server.RpcServer)."""

    @property
    def unsettled(self) -> int: ...

    def seal(self) -> None: ...

    def settle(self, limit: int | None = None) -> None: ...


class Bookkeeping:
    def __init__(
        self,
        engine: Engine,
        hot: HotSync,
        settler: Settler | None,
        publish: Callable[[dict[str, str]], None],
    ) -> None:
        """`publish` brings other changes into the hot layer (the writer's)."""
        self.engine = engine
        self.hot = hot
        self.settler = settler
        self.publish = publish
        self.accessed: dict[str, None] = {}  # accessed since the last seal
        self._sealed: dict[str, None] = {}  # sealed, not in the hot layer yet
        self.clock = engine.clock
        self.sealed_at = self.clock.monotonic()
        self.last_run = self.clock.monotonic()

    @property
    def due(self) -> bool:
        settler = self.settler
        return bool((settler is not None and settler.unsettled) or self._sealed or self.engine.cold)

    @property
    def starved(self) -> bool:
        return self.clock.monotonic() - self.last_run > STARVED_SECONDS

    def note(self, changes: dict[str, str], sealed: bool = False) -> dict[str, str]:
        """Keep the accesses among `changes` for the hot layer (for the next seal, or with
        `sealed` for this one); return the other changes (a put writes an entry's access
        fields too, so those entries need no touch)."""
        others = {entry_id: op for entry_id, op in changes.items() if op != "access"}
        accessed = self._sealed if sealed else self.accessed
        for entry_id, op in changes.items():
            if op == "access":
                accessed[entry_id] = None
            else:
                self.accessed.pop(entry_id, None)
                self._sealed.pop(entry_id, None)
        return others

    def seal(self) -> None:
        """What was gathered since the last seal is to be done: the selections answered,
        the access fields of accessed entries in the hot layer."""
        if self.settler is not None:
            self.settler.seal()
        self._sealed.update(self.accessed)
        self.accessed = {}
        self.sealed_at = self.clock.monotonic()

    def run(self, seconds: float | None) -> None:
        """About `seconds` of it (all of it with None, sealed first), in order: record the
        sealed selections, bring sealed accesses into the hot layer, serialize changed
        entries for the next snapshot."""
        self.last_run = self.clock.monotonic()
        whole = seconds is None
        if whole:
            self.seal()
        deadline = math.inf if seconds is None else time.perf_counter() + seconds
        settler = self.settler
        while settler is not None and settler.unsettled and time.perf_counter() < deadline:
            settler.settle(None if whole else ACCESS_CHUNK)
            self.publish(self.note(self.engine.drain_changes(), sealed=True))
        while self._sealed and time.perf_counter() < deadline:
            self._touch(None if whole else ACCESS_CHUNK)
        engine = self.engine
        if engine.cold and time.perf_counter() < deadline:
            engine.warm(deadline - time.perf_counter())
            if not engine.cold:
                freeze_heap()  # what the warm built lives as long as the engine
                release_free_memory()  # what the start-up read and parsed is freed

    def _touch(self, limit: int | None) -> None:
        """Bring `limit` sealed accesses (all with None) into the hot layer. The newest
        first: taking a dict's oldest keys one by one is quadratic (CPython skips the
        emptied slots at its front every time)."""
        sealed = self._sealed
        if limit is None or limit >= len(sealed):
            ids = list(sealed)
            sealed.clear()
        else:
            ids = [sealed.popitem()[0] for _ in range(limit)]
        self.hot.apply_changes(self.engine, dict.fromkeys(ids, "access"))
