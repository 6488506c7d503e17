"""The Python API (docs/design.md §5): `mnemod.open(...)` → a `Store` on the files directly.

```python
store = mnemod.open("./.mnemod", namespace="default", config={"ttl": {"context": "3650d"}})
entry = store.add("User prefers Asia/Taipei", type="preference", importance=4)
```
One writer per namespace: a second `open` of the same namespace raises `LockedError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

import structlog

from mnemod.clock import Clock, clock_from_env
from mnemod.config import Config, load_config, resolve_l1_dir
from mnemod.domain.gc import GcReport
from mnemod.domain.model import Entry
from mnemod.domain.resolve import ResolveResult
from mnemod.domain.validation import NewEntry
from mnemod.store.engine import Engine
from mnemod.store.paths import DEFAULT_NAMESPACE, NamespacePaths, check_namespace


class Store:
    """One namespace of memories, opened for writing."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @property
    def config(self) -> Config:
        return self.engine.config

    def add(
        self,
        content: str,
        type: str = "context",
        importance: int = 3,
        key: str | None = None,
        tags: list[str] | None = None,
        tier: str = "cold",
        triggers: list[str] | None = None,
        once: bool = False,
        keywords: list[str] | None = None,
        created_at: datetime | None = None,
        id: str | None = None,
        source: str = "",
    ) -> Entry:
        """Store a memory. Returns the entry holding it: after dedup, the existing one."""
        new = NewEntry(
            content=content,
            type=type,
            importance=importance,
            key=key,
            tags=list(tags or []),
            keywords=list(keywords) if keywords is not None else None,
            tier=tier,
            triggers=list(triggers or []),
            once=once,
            created_at=created_at,
            id=id,
            source=source,
        )
        return self.engine.add(new)

    def access(self, entry_id: str, now: datetime | None = None) -> Entry:
        return self.engine.access(entry_id, now=now)

    def get(self, id_or_key: str) -> Entry:
        return self.engine.get(id_or_key)

    def find(self, id_or_key: str) -> Entry | None:
        return self.engine.find(id_or_key)

    def list(self, type: str | None = None, layer: str | None = None) -> list[Entry]:
        return self.engine.select(type, layer)

    def update(self, entry_id: str, **fields: Any) -> Entry:
        return self.engine.update(entry_id, fields)

    def remove(self, entry_id: str) -> Entry:
        return self.engine.remove(entry_id)

    def promote(self, entry_id: str) -> Entry:
        return self.engine.promote(entry_id)

    def gc(self, dry_run: bool = False, now: datetime | None = None) -> GcReport:
        return self.engine.gc(dry_run=dry_run, now=now)

    def resolve(
        self,
        prompt: str,
        budget: int | None = None,
        session: str | None = None,
        now: datetime | None = None,
        trace: bool = False,
    ) -> ResolveResult:
        """Token-budgeted context for `prompt` (docs/design.md §4); records accesses of what it
        picks."""
        return self.engine.resolve(prompt, budget, session=session, now=now, trace=trace)

    def close(self) -> None:
        self.engine.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def open_store(
    data_dir: str | Path = "./.mnemod",
    namespace: str = DEFAULT_NAMESPACE,
    config: str | Path | Mapping[str, Any] | Config | None = None,
    *,
    clock: Clock | None = None,
    l1_dir: str | Path | None = None,
    actor: str = "api",
) -> Store:
    """Open a namespace for writing (takes the namespace lock until `close`)."""
    if not structlog.is_configured():
        # A library does not print: route its events to stdlib logging, whose defaults
        # (warnings and worse to stderr) the application controls.
        structlog.configure(logger_factory=structlog.stdlib.LoggerFactory())
    settings = config if isinstance(config, Config) else load_config(config)
    paths = NamespacePaths(Path(data_dir), check_namespace(namespace))
    l1 = Path(l1_dir) if l1_dir is not None else resolve_l1_dir(settings, Path(data_dir))
    engine = Engine(paths, settings, clock or clock_from_env(), l1_dir=l1, actor=actor)
    return Store(engine)
