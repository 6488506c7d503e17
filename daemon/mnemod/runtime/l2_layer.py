"""The L2 layer in memory: the entries of every `<type>.md`, which files are broken, and
writes that never lose a person's edit.

A file mnemod cannot read keeps its last good entries in force (none at start-up) and is
blocked from writes until a person fixes it: mnemod never overwrites what it could not
read. Before rewriting a file a person changed since mnemod last read it, their version is
read first, so the write keeps their edit.
"""

from __future__ import annotations

from pathlib import Path

import structlog

from mnemod.domain.model import Entry
from mnemod.errors import CorruptFileError
from mnemod.files.l2_markdown import L2Folder

log = structlog.get_logger("mnemod.l2")


class L2Layer:
    def __init__(self, folder: Path) -> None:
        self.folder = L2Folder(folder)
        self.entries: dict[str, Entry] = {}
        self.broken: dict[str, CorruptFileError] = {}

    def load(self) -> set[str]:
        """Read every file; returns the ids that appeared, changed or left."""
        before = dict(self.entries)
        loaded: dict[str, Entry] = {}
        broken: dict[str, CorruptFileError] = {}
        for path in self.folder.files():
            try:
                entries = [entry for entry, _line in self.folder.read_file(path)]
            except CorruptFileError as exc:
                broken[path.stem] = exc
                log.error("l2.file_refused", file=str(path), line=exc.line, reason=exc.reason)
                entries = self.of_type(path.stem)
            for entry in entries:
                loaded.setdefault(entry.id, entry)
        self.entries = loaded
        self.broken = broken
        return {i for i in before.keys() | loaded.keys() if before.get(i) != loaded.get(i)}

    def of_type(self, type_: str) -> list[Entry]:
        return [e for e in self.entries.values() if e.type == type_]

    def write(self, type_: str, extra: list[Entry] | None = None) -> set[str]:
        """Rewrite one type's file with its entries plus `extra`; returns ids a person's
        edit changed (read back before writing)."""
        if type_ in self.broken:
            raise self.broken[type_]
        path = self.folder.path_for(type_)
        changed: set[str] = set()
        if path.exists() and not self.folder.is_own_write(path):
            changed = self._reread(path)
        self.folder.write(type_, self.of_type(type_) + list(extra or []))
        return changed

    def is_own_write(self, path: Path) -> bool:
        return self.folder.is_own_write(path)

    def _reread(self, path: Path) -> set[str]:
        fresh = [entry for entry, _line in self.folder.read_file(path)]
        stale = {i for i, e in self.entries.items() if e.type == path.stem}
        for entry_id in stale:
            del self.entries[entry_id]
        for entry in fresh:
            self.entries[entry.id] = entry
        return stale | {e.id for e in fresh}
