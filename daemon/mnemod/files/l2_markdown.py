"""L2: one Markdown file per memory type, written by mnemod on promotion and edited by people.

A file looks like this (the heading is only a label; the text below the marker line is the
entry's content, shown as ordinary Markdown):

    # preference

    <!-- mnemod:l2 {"format": "mnemod.l2/1"} -->
    <!-- mnemod:note ... -->

    ## User prefers Asia/Taipei
    <!-- mnemod:entry {"id": "01J…", "key": null, "importance": 4, …} -->

    User prefers Asia/Taipei

Why it round-trips any content exactly: a line that starts with `<!-- mnemod:` is always a
marker, never content. A content line that would look like one (after any run of
backslashes) gets one more leading backslash on the way out and loses it on the way in, so
content cannot forge an entry. Each entry's frame is a blank line, a heading and the marker
line before it, and one blank line after it; the rest, up to the next frame, is content,
split on `\\n` only (so `\\r` and other line breaks stay part of the text). The metadata is
one line of JSON whose `<` and `>` are written as `\\u003c`/`\\u003e`, so it never closes
its HTML comment early.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import structlog

from mnemod.domain.model import Entry
from mnemod.errors import CorruptFileError, InvalidInputError
from mnemod.files.atomic import atomic_write_text

FORMAT = "mnemod.l2/1"
MARKER_PREFIX = "<!-- mnemod:"
_MARKER = re.compile(r"<!-- mnemod:([a-z0-9]+)(?: (.*))? -->")
_NEEDS_ESCAPE = re.compile(r"\\*<!-- mnemod:")
_ESCAPED = re.compile(r"\\+<!-- mnemod:")
_TYPE_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
_TITLE_SPECIAL = re.compile(r"([\\`*_\[\]<>#|])")
_TITLE_LENGTH = 60
NOTE = (
    "Edit an entry's text below its mnemod:entry line freely. Delete an entry from its "
    "heading down to the next heading. Keep each mnemod:entry line with its entry; "
    "headings are labels only."
)
# The metadata keys, in the order they are written (content is the body; type is the file).
META_KEYS: tuple[str, ...] = (
    "id",
    "key",
    "importance",
    "keywords",
    "tags",
    "tier",
    "triggers",
    "once",
    "created_at",
    "updated_at",
    "last_accessed_at",
    "access_count",
    "selected_count",
    "expires_at",
    "promotable",
    "merged_from",
    "source",
    "tokens",
)

log = structlog.get_logger("mnemod.files.l2")


def sort_entries(entries: list[Entry]) -> list[Entry]:
    """The one order of an L2 file: oldest first, id breaks ties (clean, stable diffs)."""
    return sorted(entries, key=lambda entry: (entry.created_at, entry.id))


def render_l2(type_: str, entries: list[Entry]) -> str:
    """Render one type's entries; the same entries always give the same text."""
    check_type_name(type_)
    lines = [f"# {type_}", "", _marker("l2", _dump_json({"format": FORMAT})), _marker("note", NOTE)]
    seen: set[str] = set()
    for entry in sort_entries(entries):
        if entry.type != type_:
            raise InvalidInputError("type", f"entry {entry.id} is {entry.type!r}, not {type_!r}")
        if entry.id in seen:
            raise InvalidInputError("id", f"entry {entry.id} appears twice")
        seen.add(entry.id)
        lines += ["", f"## {_title(entry)}", _marker("entry", _dump_json(_meta(entry))), ""]
        lines += [_escape(line) for line in entry.content.split("\n")]
    return "\n".join(lines) + "\n"


def parse_l2(text: str, path: Path) -> list[Entry]:
    """Read an L2 file back (sorted like `render_l2`); the type is the file's stem.

    Raises CorruptFileError naming the path and line of a malformed marker, metadata that
    does not describe an entry, a duplicate id, or text outside any entry (it would be lost
    on the next write)."""
    return [entry for entry, _line in parse_l2_lines(text, path)]


def parse_l2_lines(text: str, path: Path) -> list[tuple[Entry, int]]:
    """Like `parse_l2`, with the 1-based line of each entry's marker."""
    type_ = path.stem
    lines = _split_lines(text)
    markers: list[int] = []
    for index, line in enumerate(lines):
        if not line.startswith(MARKER_PREFIX):
            continue
        kind, payload = _read_marker(line, path, index + 1)
        if kind == "entry":
            markers.append(index)
        elif markers:
            raise CorruptFileError(path, f"a mnemod:{kind} line belongs at the top", index + 1)
        elif kind == "l2":
            _check_header(payload, path, index + 1)
    starts = [_frame_start(lines, marker) for marker in markers]
    _check_preamble(lines[: starts[0] if starts else len(lines)], path)
    found: list[tuple[Entry, int]] = []
    ids: dict[str, int] = {}
    for number, marker in enumerate(markers):
        end = starts[number + 1] if number + 1 < len(markers) else len(lines)
        body = lines[marker + 1 : end]
        if body and _is_blank(body[0]):
            body = body[1:]
        content = "\n".join(_unescape(line) for line in body)
        entry = _entry(lines[marker], type_, content, path, marker + 1)
        if entry.id in ids:
            raise CorruptFileError(
                path, f"id {entry.id} already used by the entry at line {ids[entry.id]}", marker + 1
            )
        ids[entry.id] = marker + 1
        found.append((entry, marker + 1))
    found.sort(key=lambda pair: (pair[0].created_at, pair[0].id))
    return found


def check_type_name(type_: str) -> None:
    """A type names a file, so it is a short lowercase word."""
    if not _TYPE_NAME.fullmatch(type_):
        raise InvalidInputError(
            "type", f"{type_!r} is not a memory type (lowercase letters, digits, _)"
        )


def _marker(kind: str, payload: str) -> str:
    return f"{MARKER_PREFIX}{kind} {payload} -->"


def _dump_json(data: dict[str, Any]) -> str:
    text = json.dumps(data, ensure_ascii=False)
    # `<` and `>` only occur inside JSON strings, where the escapes mean the same.
    return text.replace("<", "\\u003c").replace(">", "\\u003e")


def _meta(entry: Entry) -> dict[str, Any]:
    data = entry.to_dict()
    return {key: data[key] for key in META_KEYS}


def _title(entry: Entry) -> str:
    """A one-line label: the key, else the first non-blank line of content, else the id."""
    source = entry.key or next((line for line in entry.content.splitlines() if line.strip()), "")
    words = " ".join("".join(ch if ch.isprintable() else " " for ch in source).split())
    if len(words) > _TITLE_LENGTH:
        words = words[: _TITLE_LENGTH - 1].rstrip() + "…"
    return _TITLE_SPECIAL.sub(r"\\\1", words) if words else entry.id


def _escape(line: str) -> str:
    return "\\" + line if _NEEDS_ESCAPE.match(line) else line


def _unescape(line: str) -> str:
    return line[1:] if _ESCAPED.match(line) else line


def _split_lines(text: str) -> list[str]:
    """Split on `\\n` only. A file an editor turned into CRLF throughout (mnemod's own header
    line is always LF, so its files never are) is read as LF."""
    text = text.removeprefix("\ufeff")
    if "\n" in text and text.count("\r\n") == text.count("\n"):
        text = text.replace("\r\n", "\n")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _is_blank(line: str) -> bool:
    return line.strip(" \t") == ""


def _frame_start(lines: list[str], marker: int) -> int:
    """The frame before a marker: its heading, and the blank line before that."""
    start = marker
    if start > 0 and lines[start - 1].startswith("#"):
        start -= 1
    if start > 0 and _is_blank(lines[start - 1]):
        start -= 1
    return start


def _read_marker(line: str, path: Path, number: int) -> tuple[str, str]:
    match = _MARKER.fullmatch(line.rstrip(" \t\r"))
    if match is None:
        raise CorruptFileError(
            path,
            "malformed mnemod marker (a content line starting like this needs a leading \\)",
            number,
        )
    kind, payload = match.group(1), match.group(2) or ""
    if kind not in {"l2", "note", "entry"}:
        raise CorruptFileError(path, f"unknown marker mnemod:{kind}", number)
    return kind, payload


def _check_header(payload: str, path: Path, number: int) -> None:
    data = _load_json(payload, path, number)
    if data.get("format") != FORMAT:
        raise CorruptFileError(
            path, f"unsupported format {data.get('format')!r} (expected {FORMAT})", number
        )


def _check_preamble(lines: list[str], path: Path) -> None:
    for index, line in enumerate(lines):
        if not (_is_blank(line) or line.startswith(("#", MARKER_PREFIX))):
            raise CorruptFileError(
                path,
                "text before the first entry would be lost on the next write; move it into one",
                index + 1,
            )


def _load_json(payload: str, path: Path, number: int) -> dict[str, Any]:
    try:
        data = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise CorruptFileError(
            path, f"metadata is not valid JSON: {exc.msg} at column {exc.colno}", number
        ) from exc
    if not isinstance(data, dict):
        raise CorruptFileError(path, "metadata must be a JSON object", number)
    return data


def _entry(line: str, type_: str, content: str, path: Path, number: int) -> Entry:
    _kind, payload = _read_marker(line, path, number)
    data = _load_json(payload, path, number)
    unknown = sorted(set(data) - set(META_KEYS))
    if unknown:
        raise CorruptFileError(path, f"unknown metadata key {unknown[0]!r}", number)
    missing = [
        key for key in ("id", "created_at", "updated_at", "last_accessed_at") if key not in data
    ]
    if missing:
        raise CorruptFileError(path, f"metadata lacks {missing[0]!r}", number)
    try:
        return Entry.from_dict({**data, "type": type_, "content": content})
    except InvalidInputError as exc:
        raise CorruptFileError(path, f"bad metadata: {exc}", number) from exc


class L2Folder:
    """The L2 folder: reads every `<type>.md` and writes one atomically, each with the
    SHA-256 of its bytes (how store.l2_layer tells mnemod's own writes from a person's)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def path_for(self, type_: str) -> Path:
        check_type_name(type_)
        return self.path / f"{type_}.md"

    def files(self) -> list[Path]:
        """The L2 files, sorted; hidden files (editor swap files and the like) are skipped."""
        if not self.path.is_dir():
            return []
        return sorted(
            p for p in self.path.glob("*.md") if p.is_file() and not p.name.startswith(".")
        )

    def load(self) -> dict[str, list[Entry]]:
        """Every type's entries. A broken file raises CorruptFileError and is left untouched;
        an id used in two files is reported at its second place."""
        result: dict[str, list[Entry]] = {}
        seen: dict[str, Path] = {}
        for path in self.files():
            loaded = self.read_file(path)
            for entry, line in loaded:
                if entry.id in seen:
                    raise CorruptFileError(
                        path, f"id {entry.id} is also in {seen[entry.id].name}", line
                    )
                seen[entry.id] = path
            result[path.stem] = [entry for entry, _line in loaded]
        return result

    def read_file(self, path: Path) -> list[tuple[Entry, int]]:
        """One file's entries with their marker lines (for a watcher reloading one file)."""
        return self.read(path)[0]

    def read(self, path: Path) -> tuple[list[tuple[Entry, int]], str]:
        """`read_file`, and the SHA-256 of the bytes it read."""
        if not _TYPE_NAME.fullmatch(path.stem):
            raise CorruptFileError(
                path, "file name is not a memory type (lowercase letters, digits, _)"
            )
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise CorruptFileError(path, f"cannot read: {exc.strerror}") from exc
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data[: exc.start].count(b"\n") + 1
            raise CorruptFileError(path, "not UTF-8 text", line) from exc
        return parse_l2_lines(text, path), hashlib.sha256(data).hexdigest()

    def write(self, type_: str, entries: list[Entry]) -> str:
        """Render and write one type's file atomically; returns the SHA-256 of the bytes."""
        path = self.path_for(type_)
        text = render_l2(type_, entries)
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
        if self.digest(path) == digest:
            return digest  # unchanged: spare the disk (an SD card on a Pi) and the watchers
        atomic_write_text(path, text)
        log.info("l2.written", type=type_, entries=len(entries))
        return digest

    def digest(self, path: Path) -> str | None:
        """The SHA-256 of a file's bytes; None when it cannot be read (or is gone)."""
        try:
            return hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            return None
