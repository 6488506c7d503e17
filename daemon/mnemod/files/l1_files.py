"""L1: a read-only folder of `*.toml` and `*.md` files that people (or config management) write.

A TOML file holds `[[memory]]` items; a Markdown file is one always-injected block. mnemod
never writes here. A file that does not parse or fails validation is reported with file and
line, and the last good version of that file stays in force: a typo while someone is editing
must not make the agent forget its standing instructions.

A symlink to a file inside the folder is read; one leading outside it is refused like a
broken file: whatever can write a link here must not get any file the daemon can read
(an SSH key, another user's notes) injected into prompts.
"""

from __future__ import annotations

import re
import threading
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import structlog

from mnemod.config import LimitsConfig
from mnemod.domain.validation import check_strings, compile_trigger
from mnemod.errors import InvalidInputError
from mnemod.ids import is_valid_id

SUFFIXES = (".toml", ".md")
ITEM_KEYS = ("content", "id", "importance", "once", "tags", "triggers")
MAX_TAG_LENGTH = 100
_TOML_WHERE = re.compile(r"\s*\((?:at line (\d+), column (\d+)|at end of document)\)\s*$")
_STEM_UNSAFE = re.compile(r"[^A-Za-z0-9_.:\-]")
_STEM_LENGTH = 48

Kind = Literal["memory", "block"]
log = structlog.get_logger("mnemod.files.l1")


@dataclass(frozen=True)
class L1Item:
    """One standing memory. No triggers: always injected (hot); with triggers: warm."""

    id: str
    content: str
    triggers: tuple[str, ...] = ()
    once: bool = False
    tags: tuple[str, ...] = ()
    importance: int = 3
    source: str = ""
    kind: Kind = "memory"

    @property
    def always(self) -> bool:
        return not self.triggers

    @property
    def tier(self) -> str:
        return "hot" if self.always else "warm"


@dataclass(frozen=True)
class L1Problem:
    """Why a file was not (re)loaded, and where; prints as `path:line: reason`."""

    path: Path
    line: int | None
    reason: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line is not None else str(self.path)
        return f"{where}: {self.reason}"


class _FileError(Exception):
    def __init__(self, line: int | None, reason: str) -> None:
        super().__init__(reason)
        self.line = line
        self.reason = reason


def is_l1_file(path: Path) -> bool:
    """The files the registry reads: `*.toml` and `*.md`, not hidden (editor temp files)."""
    return path.suffix in SUFFIXES and not path.name.startswith(".")


def derived_id(stem: str, index: int | None = None) -> str:
    """`l1.<stem>` for a block, `l1.<stem>.<n>` (1-based) for the n-th item of a TOML file."""
    safe = _STEM_UNSAFE.sub("-", stem)[:_STEM_LENGTH]
    return f"l1.{safe}" if index is None else f"l1.{safe}.{index}"


def parse_l1(path: Path, data: bytes, limits: LimitsConfig) -> list[tuple[L1Item, int]]:
    """The items of one L1 file with the line each starts on. Raises `_FileError`."""
    try:
        text = data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise _FileError(data[: exc.start].count(b"\n") + 1, "not UTF-8 text") from exc
    if path.suffix == ".md":
        return _parse_block(path, text, limits)
    return _parse_toml(path, text, limits)


def _parse_block(path: Path, text: str, limits: LimitsConfig) -> list[tuple[L1Item, int]]:
    if not text.strip():
        return []
    _check_size(text, limits, 1)
    item = L1Item(id=derived_id(path.stem), content=text, source=path.name, kind="block")
    return [(item, 1)]


def _parse_toml(path: Path, text: str, limits: LimitsConfig) -> list[tuple[L1Item, int]]:
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _toml_error(str(exc), text) from exc
    locator = _Locator(text)
    for key in document:
        if key != "memory":
            raise _FileError(
                locator.key_line(key), f"unknown key {key!r} (expected [[memory]] items)"
            )
    raw = document.get("memory", [])
    if not isinstance(raw, list):
        raise _FileError(locator.key_line("memory"), "memory must be [[memory]] items, not a table")
    found: list[tuple[L1Item, int]] = []
    ids: dict[str, int] = {}
    for number, table in enumerate(raw, start=1):
        line = locator.item_line(number)
        if not isinstance(table, dict):
            raise _FileError(line, f"memory item {number} must be a table")
        item = _item(path, number, table, limits, locator)
        if item.id in ids:
            raise _FileError(
                line, f"id {item.id} is already used by the item at line {ids[item.id]}"
            )
        ids[item.id] = line
        found.append((item, line))
    return found


def _item(
    path: Path, number: int, table: dict[str, Any], limits: LimitsConfig, locator: _Locator
) -> L1Item:
    def fail(key: str, reason: str) -> _FileError:
        return _FileError(locator.key_line(key, number), f"memory item {number}: {key}: {reason}")

    unknown = sorted(set(table) - set(ITEM_KEYS))
    if unknown:
        raise fail(unknown[0], f"unknown key (known: {', '.join(ITEM_KEYS)})")
    content = table.get("content")
    if not isinstance(content, str) or not content.strip():
        raise fail("content", "required, a non-empty string")
    size = len(content.encode("utf-8"))
    if size > limits.max_content_bytes:
        raise fail("content", f"{size} bytes is over the limit of {limits.max_content_bytes}")
    item_id = table.get("id", derived_id(path.stem, number))
    if not isinstance(item_id, str) or not is_valid_id(item_id):
        raise fail("id", "use 1–64 letters, digits, '_', '.', ':' or '-'")
    importance = table.get("importance", 3)
    if isinstance(importance, bool) or not isinstance(importance, int) or not 1 <= importance <= 5:
        raise fail("importance", "must be an integer from 1 to 5")
    once = table.get("once", False)
    if not isinstance(once, bool):
        raise fail("once", "must be true or false")
    try:
        tags = table.get("tags", [])
        check_strings("tags", tags, limits.max_tags, MAX_TAG_LENGTH)
        triggers = table.get("triggers", [])
        check_strings("triggers", triggers, limits.max_triggers, limits.max_trigger_length)
        for pattern in triggers:
            compile_trigger(pattern)
    except InvalidInputError as exc:
        raise fail(exc.field, exc.reason) from exc
    return L1Item(
        id=item_id,
        content=content,
        triggers=tuple(triggers),
        once=once,
        tags=tuple(tags),
        importance=importance,
        source=path.name,
        kind="memory",
    )


def _check_size(text: str, limits: LimitsConfig, line: int) -> None:
    size = len(text.encode("utf-8"))
    if size > limits.max_content_bytes:
        raise _FileError(line, f"{size} bytes is over the limit of {limits.max_content_bytes}")


def _toml_error(message: str, text: str) -> _FileError:
    """tomllib puts the place at the end of its message: `... (at line 3, column 7)`."""
    match = _TOML_WHERE.search(message)
    if match is None:
        return _FileError(None, f"not valid TOML: {message}")
    reason = message[: match.start()]
    if match.group(1) is None:
        return _FileError(text.count("\n") + 1, f"not valid TOML: {reason} at end of file")
    return _FileError(int(match.group(1)), f"not valid TOML: {reason} (column {match.group(2)})")


class _Locator:
    """Best-effort line numbers for schema errors (tomllib keeps no positions): the n-th
    `[[memory]]` header, and a key's line within that item."""

    def __init__(self, text: str) -> None:
        self.lines = text.split("\n")
        header = re.compile(r"[ \t]*\[\[[ \t]*(?:memory|\"memory\"|'memory')[ \t]*\]\]")
        self.headers = [i for i, line in enumerate(self.lines) if header.match(line)]

    def item_line(self, number: int) -> int:
        if number <= len(self.headers):
            return self.headers[number - 1] + 1
        return self.key_line("memory")

    def key_line(self, key: str, number: int | None = None) -> int:
        if number is None or number > len(self.headers):
            start, end = 0, len(self.lines)
        else:
            start = self.headers[number - 1]
            end = self.headers[number] if number < len(self.headers) else len(self.lines)
        quoted = re.escape(key)
        pattern = re.compile(rf"[ \t]*\[*[ \t]*(?:{quoted}|\"{quoted}\"|'{quoted}')[ \t]*[=\]]")
        for index in range(start, end):
            if pattern.match(self.lines[index]):
                return index + 1
        return start + 1


class L1Registry:
    """The L1 items in force, file by file. Safe to call from a watcher thread."""

    def __init__(self, folder: Path, limits: LimitsConfig) -> None:
        self.folder = Path(folder)
        self.limits = limits
        self._files: dict[str, tuple[L1Item, ...]] = {}
        self._problems: dict[str, L1Problem] = {}
        self._lock = threading.Lock()

    def reload_all(self) -> list[L1Problem]:
        """Re-read every file; files gone from the folder are forgotten."""
        present = self._listing()
        for name in set(self._files) | set(self._problems):
            if name not in {path.name for path in present}:
                self.forget_file(self.folder / name)
        problems = [p for p in (self.reload_file(path) for path in present) if p is not None]
        log.info("l1.reloaded", files=len(present), items=len(self.items()), problems=len(problems))
        return problems

    def reload_file(self, path: Path) -> L1Problem | None:
        """Re-read one file. On a problem the last good version stays and the problem is
        returned. A path that is not an L1 file is ignored; a missing file is forgotten."""
        path = Path(path)
        if not is_l1_file(path):
            return None
        target = self.folder / path.name
        outside = self._leads_outside(target)
        if outside is not None:
            return self._reject(
                target, _FileError(None, f"a symlink to {outside}, outside the L1 folder: refused")
            )
        try:
            data = target.read_bytes()
        except FileNotFoundError:
            self.forget_file(target)
            return None
        except OSError as exc:
            return self._reject(target, _FileError(None, f"cannot read: {exc.strerror}"))
        try:
            loaded = parse_l1(target, data, self.limits)
            self._check_unique(target.name, loaded)
        except _FileError as exc:
            return self._reject(target, exc)
        with self._lock:
            self._files[target.name] = tuple(item for item, _line in loaded)
            self._problems.pop(target.name, None)
        log.info("l1.file_loaded", file=target.name, items=len(loaded))
        return None

    def forget_file(self, path: Path) -> bool:
        """A file was deleted: its items leave. Returns whether anything was known of it."""
        name = Path(path).name
        with self._lock:
            known = self._files.pop(name, None) is not None
            known = self._problems.pop(name, None) is not None or known
        if known:
            log.info("l1.file_forgotten", file=name)
        return known

    def items(self) -> list[L1Item]:
        """Every item in force: by file name, then in file order."""
        with self._lock:
            return [item for name in sorted(self._files) for item in self._files[name]]

    def problems(self) -> list[L1Problem]:
        """Files whose latest version was refused (their last good version is in force)."""
        with self._lock:
            return [self._problems[name] for name in sorted(self._problems)]

    def _listing(self) -> list[Path]:
        if not self.folder.is_dir():
            return []
        return sorted(p for p in self.folder.iterdir() if is_l1_file(p) and p.is_file())

    def _leads_outside(self, path: Path) -> Path | None:
        """Where a symlink leads when that is outside the folder, else None."""
        if not path.is_symlink():
            return None
        try:
            real = path.resolve(strict=True)
            folder = self.folder.resolve(strict=True)
        except (OSError, RuntimeError):  # dangling or a loop: reading it reports that
            return None
        return None if real.is_relative_to(folder) else real

    def _check_unique(self, name: str, loaded: Iterable[tuple[L1Item, int]]) -> None:
        with self._lock:
            taken = {
                item.id: other
                for other, items in self._files.items()
                if other != name
                for item in items
            }
        for item, line in loaded:
            if item.id in taken:
                raise _FileError(line, f"id {item.id} is already used in {taken[item.id]}")

    def _reject(self, path: Path, error: _FileError) -> L1Problem:
        problem = L1Problem(path=path, line=error.line, reason=error.reason)
        with self._lock:
            self._problems[path.name] = problem
            kept = path.name in self._files
        log.warning(
            "l1.file_refused",
            file=path.name,
            line=error.line,
            reason=error.reason,
            last_good_kept=kept,
        )
        return problem
