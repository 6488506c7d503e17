"""The L2 files as derived from the committed L2 entries, and a person's edits read back.

The L2 entries live in the engine and the change log; each `<type>.md` is brought up to
date after the commits that change its type, and a write that fails (a full or read-only
disk) is tried again later: the change stays committed and nothing is reverted. What a
file held when mnemod last wrote or read it is its *base*: a file whose bytes are not the
base's is a person's edit, which is read and turned into changes against the base (so the
edit is kept, and nothing committed since is undone). A file mnemod cannot read is left
untouched, its type's writes wait (`broken`, with file and line), and all else goes on.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from mnemod.clock import Clock, SystemClock
from mnemod.domain.model import Entry
from mnemod.errors import CorruptFileError
from mnemod.files.l2_markdown import L2Folder, render_l2

log = structlog.get_logger("mnemod.l2")
ACCESS_WRITE_SECONDS = 30.0  # a type whose entries only were accessed: written this often
RETRY_SECONDS = 1.0
RETRY_CAP_SECONDS = 60.0
# What a person does not edit: an L2 file's copy of them may lag (see ACCESS_WRITE_SECONDS).
ACCESS_FIELDS = ("access_count", "selected_count", "last_accessed_at")
_FIELDS = tuple(f.name for f in dataclasses.fields(Entry))


@dataclass
class Edit:
    """A person's change to one file: entries to put (new or changed) and ids removed."""

    type: str
    puts: list[Entry] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


@dataclass
class _File:
    base: dict[str, Entry] = field(default_factory=dict)  # as on disk when last written/read
    digest: str | None = None  # of those bytes; None: no such file
    hard: bool = False  # a change other than accesses waits to be written
    soft: bool = False  # accesses wait to be written
    soft_since: float = 0.0
    failures: int = 0
    retry_at: float = 0.0
    error: str = ""


class L2Files:
    def __init__(self, folder: Path, clock: Clock | None = None) -> None:
        """`clock` times the retries and the wait of accesses-only writes."""
        self.folder = L2Folder(folder)
        self.clock: Clock = clock or SystemClock()
        self._files: dict[str, _File] = {}
        self.broken: dict[str, CorruptFileError] = {}
        self.written: dict[str, str] = {}  # type -> digest of mnemod's last write (checkpointed)

    def _file(self, type_: str) -> _File:
        return self._files.setdefault(type_, _File())

    # ---- start-up ----------------------------------------------------------------------
    def read_all(self) -> dict[str, Entry]:
        """Every file's entries (the L2 entries of a store from before the change log); a
        broken file contributes none and is reported."""
        found: dict[str, Entry] = {}
        for path in self.folder.files():
            parsed = self._read(path)
            if parsed is not None:
                for entry in parsed.values():
                    found.setdefault(entry.id, entry)
        return found

    def reconcile(self, committed: Mapping[str, Entry], written: Mapping[str, str]) -> list[Edit]:
        """At start: compare each file with the committed entries. A file mnemod wrote last
        (its digest is `written`'s), or one that already says what is committed, is ours:
        rewritten if behind. Any other was edited by a person while mnemod was away: the
        edit is returned, as changes against what is committed."""
        self.written = dict(written)
        by_type = _by_type(committed.values())
        edits: list[Edit] = []
        for type_ in sorted(set(by_type) | {p.stem for p in self.folder.files()}):
            state = self._file(type_)
            path = self.folder.path_for(type_)
            wanted = by_type.get(type_, {})
            if not path.exists():
                if type_ in self.written and not wanted:
                    continue
                state.hard = bool(wanted)
                continue
            parsed = self._read(path)
            if parsed is None:
                continue  # broken: reported; its writes wait
            if state.digest == self.written.get(type_) or _same(parsed, wanted):
                # ours: what it holds is what the next records must know as ours, so that
                # a crash before its next write does not make it look like a person's edit
                if state.digest is not None:
                    self.written[type_] = state.digest
                state.hard = render_l2(type_, list(wanted.values())) != _rendered(type_, parsed)
                continue
            edit = _diff(type_, wanted, parsed)
            state.hard = True
            if edit.puts or edit.removed:
                edits.append(edit)
        return edits

    # ---- after commits -----------------------------------------------------------------
    def mark(self, types: Iterable[str], accesses_only: bool = False) -> None:
        for type_ in types:
            state = self._file(type_)
            if accesses_only:
                if not state.soft:
                    state.soft, state.soft_since = True, self.clock.monotonic()
            else:
                state.hard = True

    def due(self, everything: bool = False) -> list[str]:
        """Types whose file should be written now."""
        now = self.clock.monotonic()
        due = []
        for type_, state in self._files.items():
            if type_ in self.broken or state.retry_at > now:
                continue
            soft_due = state.soft and (everything or now - state.soft_since >= ACCESS_WRITE_SECONDS)
            if state.hard or soft_due:
                due.append(type_)
        return sorted(due)

    @property
    def waiting(self) -> dict[str, str]:
        """Types whose file is behind, with why (a broken file, a failed write)."""
        found = {}
        for type_, state in self._files.items():
            if type_ in self.broken:
                exc = self.broken[type_]
                found[type_] = f"{exc.path.name} line {exc.line}: {exc.reason}"
            elif (state.hard or state.soft) and state.error:
                found[type_] = state.error
        return found

    def write(self, type_: str, entries: list[Entry]) -> str | None:
        """Bring one file up to date with `entries`; its digest, or None when the write
        failed (tried again later, logged) or must wait. A person's unread edit in the
        way is not overwritten: call `read_edit` first (the writer does)."""
        state = self._file(type_)
        try:
            digest = self.folder.write(type_, entries)
        except OSError as exc:
            state.failures += 1
            delay = min(RETRY_CAP_SECONDS, RETRY_SECONDS * 2 ** min(state.failures - 1, 16))
            state.retry_at = self.clock.monotonic() + delay
            state.error = f"cannot write: {exc.strerror or exc}"
            log.error("l2.write_failed", type=type_, error=state.error, retry_in=delay)
            return None
        state.base = {e.id: copy.copy(e) for e in entries}
        state.digest = digest
        state.hard = state.soft = False
        state.failures, state.retry_at, state.error = 0, 0.0, ""
        self.written[type_] = digest
        return digest

    # ---- a person's edits ---------------------------------------------------------------
    def is_own(self, path: Path) -> bool:
        """The file holds what mnemod last wrote or read there."""
        state = self._files.get(path.stem)
        return state is not None and state.digest == self.folder.digest(path)

    def read_edit(self, path: Path, committed: Mapping[str, Entry]) -> Edit | None:
        """A person changed `path` (or it is new): their changes against the file's base,
        or None when there are none to take (unchanged, or broken: then reported and its
        writes wait until it reads again)."""
        if path.name.startswith(".") or path.suffix != ".md":
            return None
        type_ = path.stem
        state = self._file(type_)
        if not path.exists():
            gone = [i for i in state.base if i in committed]
            state.base, state.digest = {}, None
            self.broken.pop(type_, None)
            if gone:
                state.hard = True
            return Edit(type_, removed=gone) if gone else None
        if (
            state.digest is not None
            and state.digest == self.folder.digest(path)
            and type_ not in self.broken
        ):
            return None
        base = state.base
        parsed = self._read(path)
        if parsed is None:
            return None
        edit = _diff(type_, {**base}, parsed, committed)
        if render_l2(type_, _of_type(committed, type_)) != _rendered(type_, parsed):
            state.hard = True
        return edit if edit.puts or edit.removed else None

    def _read(self, path: Path) -> dict[str, Entry] | None:
        """Parse one file and make it the base; None (and `broken`) when it does not read."""
        type_ = path.stem
        try:
            read, digest = self.folder.read(path)
        except CorruptFileError as exc:
            if self.broken.get(type_) != exc:
                log.error("l2.file_refused", file=str(path), line=exc.line, reason=exc.reason)
            self.broken[type_] = exc
            return None
        if type_ in self.broken:
            log.info("l2.file_fixed", file=str(path))
            del self.broken[type_]
        parsed = {entry.id: entry for entry, _line in read}
        state = self._file(type_)
        state.base = {i: copy.copy(e) for i, e in parsed.items()}
        state.digest = digest
        return parsed


def _by_type(entries: Iterable[Entry]) -> dict[str, dict[str, Entry]]:
    found: dict[str, dict[str, Entry]] = {}
    for entry in entries:
        found.setdefault(entry.type, {})[entry.id] = entry
    return found


def _of_type(entries: Mapping[str, Entry], type_: str) -> list[Entry]:
    return [e for e in entries.values() if e.type == type_]


def _rendered(type_: str, parsed: Mapping[str, Entry]) -> str:
    return render_l2(type_, list(parsed.values()))


def _edited_view(entry: Entry) -> Entry:
    plain = copy.copy(entry)
    plain.access_count = plain.selected_count = 0
    plain.last_accessed_at = plain.created_at
    return plain


def _same(parsed: Mapping[str, Entry], wanted: Mapping[str, Entry]) -> bool:
    """The same entries, but for the access fields (which a file may have older)."""
    if parsed.keys() != wanted.keys():
        return False
    return all(_edited_view(parsed[i]) == _edited_view(wanted[i]) for i in parsed)


def _diff(
    type_: str,
    base: Mapping[str, Entry],
    parsed: Mapping[str, Entry],
    committed: Mapping[str, Entry] | None = None,
) -> Edit:
    """What the person changed from `base` to `parsed`, as changes to `committed` (base
    when None), field by field: a field the person changed takes their value, every other
    keeps what was committed (since, too); a new entry is taken whole, a deleted one goes.
    The access fields always stay as committed: they go on counting."""
    now = committed if committed is not None else base
    edit = Edit(type_)
    for entry_id, entry in parsed.items():
        before = base.get(entry_id)
        if before is not None and _edited_view(before) == _edited_view(entry):
            continue
        current = now.get(entry_id)
        if current is None:
            edit.puts.append(copy.copy(entry))
            continue
        taken = copy.copy(current)
        for name in _FIELDS:
            if name in ACCESS_FIELDS:
                continue
            theirs = getattr(entry, name)
            if before is None or theirs != getattr(before, name):
                setattr(taken, name, theirs)
        edit.puts.append(taken)
    edit.removed = [i for i in base if i not in parsed and i in now]
    return edit
