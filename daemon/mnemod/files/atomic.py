"""Atomic file writes: temp file named per process in the same folder → fsync → os.replace →
fsync of the folder. A reader sees the old file or the new one, never half of either.

Memory files are private whatever the umask: files FILE_MODE (0600), folders DIR_MODE
(0700). `allow_group` widens both to the owner's group (0640 / 0750), for an operator who
puts a person's account in the data folder's group (docs/operations.md).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Iterable, Iterator
from pathlib import Path

_counter = 0
_CHUNK = 65536  # bytes read at a time from a file's end
FILE_MODE = 0o600
DIR_MODE = 0o700
_counter_lock = threading.Lock()


def _temp_name(path: Path) -> Path:
    global _counter
    with _counter_lock:
        _counter += 1
        serial = _counter
    return path.with_name(f".{path.name}.{os.getpid()}.{serial}.tmp")


def allow_group(enabled: bool) -> None:
    """Group-readable files and group-accessible folders from now on (`[daemon]
    group_access`); the process's own setting, taken from the config at start."""
    global FILE_MODE, DIR_MODE
    FILE_MODE, DIR_MODE = (0o640, 0o750) if enabled else (0o600, 0o700)


def make_dirs(folder: Path) -> None:
    """Create `folder` and its missing parents with DIR_MODE (the umask cannot widen or
    narrow it); an existing folder is left as it is."""
    if folder.is_dir():
        return
    if not folder.parent.is_dir():
        make_dirs(folder.parent)
    try:
        folder.mkdir(DIR_MODE)
    except FileExistsError:
        return
    folder.chmod(DIR_MODE)


def open_private(path: Path, flags: int) -> int:
    """os.open with FILE_MODE for a file it creates, whatever the umask."""
    fd = os.open(path, flags | os.O_CREAT, FILE_MODE)
    if os.fstat(fd).st_mode & 0o777 != FILE_MODE:
        try:
            os.fchmod(fd, FILE_MODE)
        except OSError:
            pass  # not ours to change (another owner): it keeps its mode
    return fd


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes, backup: bool = False) -> None:
    """Replace `path` with `data` durably. With `backup`, the previous file becomes `<name>.bak`
    (hard link, so there is never a moment without a good `path`)."""
    atomic_write_chunks(path, [data], backup)


def atomic_write_chunks(path: Path, chunks: Iterable[bytes], backup: bool = False) -> None:
    """`atomic_write_bytes` of the concatenated `chunks`, made as they are written."""
    make_dirs(path.parent)
    temp = _temp_name(path)
    try:
        with os.fdopen(open_private(temp, os.O_WRONLY | os.O_TRUNC), "wb") as handle:
            for chunk in chunks:
                handle.write(chunk)
            handle.flush()
            os.fsync(handle.fileno())
        if backup and path.exists():
            bak = path.with_name(path.name + ".bak")
            bak_temp = _temp_name(bak)
            os.link(path, bak_temp)
            os.replace(bak_temp, bak)
        os.replace(temp, path)
    finally:
        if temp.exists():
            temp.unlink()
    fsync_dir(path.parent)


def atomic_write_text(path: Path, text: str, backup: bool = False) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), backup=backup)


def append_line(path: Path, line: str) -> None:
    """Append one line (JSON lines logs: history, archive) and fsync it."""
    append_lines(path, [line])


def append_lines(path: Path, lines: list[str], sync: bool = True) -> None:
    """Append whole lines (see `append_bytes`)."""
    if lines:
        append_bytes(path, whole_lines(lines), sync)


def whole_lines(lines: list[str]) -> bytes:
    """`lines` as the bytes `append_lines` appends: each ends with one newline."""
    return "".join(line.rstrip("\n") + "\n" for line in lines).encode()


def append_bytes(path: Path, data: bytes, sync: bool = True) -> int:
    """Append `data` and fsync (unless `sync` is False: a file derived from a log that is
    fsynced, the caller syncs before it relies on it); returns the file's size before.
    On failure (a full disk) what reached the file is cut again, so no torn line is left
    behind to be written twice."""
    make_dirs(path.parent)
    fd = open_private(path, os.O_WRONLY | os.O_APPEND)
    try:
        return _append_fd(fd, data, sync)
    finally:
        os.close(fd)


def _append_fd(fd: int, data: bytes, sync: bool, before: int | None = None) -> int:
    """`append_bytes` on an open descriptor (`before`: its size, when the caller read it)."""
    if before is None:
        before = os.fstat(fd).st_size
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if sync:
            os.fsync(fd)
    except OSError:
        try:
            os.ftruncate(fd, before)
            if sync:
                os.fsync(fd)
        except OSError:
            pass  # cut when the file is next opened (ensure_whole_lines, the log's)
        raise
    return before


class Appender:
    """`append_bytes` to one file at a time through a descriptor kept open between
    appends: opening, looking at the folder and closing again cost more CPU than a short
    append itself (about 25 of 30 µs unsynced, and 70-140 µs more around an fsync, on a
    shared two-vCPU machine). What the name leads to is still looked at (a permission
    check and an fstat, 2 µs each): a file removed meanwhile (a person removed it) is
    opened again by its name, as `append_bytes` would create it, so nothing is appended to
    a file nobody can read; a name that cannot be written now (its mount made read-only
    under the open descriptor) fails as `append_bytes` would; after a failed append (a
    full disk) the next opens the file again too. `close` (or the object's end) closes
    the descriptor."""

    def __init__(self) -> None:
        self._path: Path | None = None
        self._fd = -1
        self._closer: weakref.finalize[[int], Appender] | None = None

    def append(self, path: Path, data: bytes, sync: bool = True) -> int:
        """`append_bytes(path, data, sync)`: the size of `path` before."""
        if path != self._path or self._fd < 0 or not os.access(path, os.W_OK):
            self._open(path)  # raises where the name cannot be written (a read-only mount)
        stat = os.fstat(self._fd)
        if stat.st_nlink == 0:  # removed under us: appended by name again
            self._open(path)
            stat = os.fstat(self._fd)
        try:
            return _append_fd(self._fd, data, sync, stat.st_size)
        except OSError:
            self.close()  # the next try opens the file by its name again, as at first
            raise

    def _open(self, path: Path) -> None:
        self.close()
        make_dirs(path.parent)
        fd = open_private(path, os.O_WRONLY | os.O_APPEND)
        self._path, self._fd = path, fd
        self._closer = weakref.finalize(self, os.close, fd)

    def close(self) -> None:
        if self._closer is not None:
            self._closer()  # closes the descriptor once
        self._path, self._fd, self._closer = None, -1, None


def fsync_file(path: Path) -> None:
    """fsync a file that exists (appended without it before)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_whole_lines(path: Path) -> int:
    """Cut a torn last line (no newline at the end) left by a crash or a kill -9 mid-append
    (a write the kernel cut short, at a page boundary); returns the bytes cut."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0
    if size == 0:
        return 0
    with path.open("r+b") as handle:
        handle.seek(size - 1)
        if handle.read(1) == b"\n":
            return 0
        keep = 0
        end = size
        while end > 0:  # back to the last newline, however long the torn line
            start = max(0, end - _CHUNK)
            handle.seek(start)
            found = handle.read(end - start).rfind(b"\n")
            if found >= 0:
                keep = start + found + 1
                break
            end = start
        handle.truncate(keep)
        handle.flush()
        os.fsync(handle.fileno())
    return size - keep


def lines_backward(path: Path) -> Iterator[bytes]:
    """The file's lines, last first, read from its end in chunks: the tail of a large
    append-only file without reading the rest. Nothing for a missing file."""
    try:
        handle = path.open("rb")
    except FileNotFoundError:
        return
    with handle:
        end = handle.seek(0, os.SEEK_END)
        rest = b""
        while end > 0:
            start = max(0, end - _CHUNK)
            handle.seek(start)
            parts = (handle.read(end - start) + rest).split(b"\n")
            rest = parts[0]
            for line in reversed(parts[1:]):
                if line:
                    yield line
            end = start
        if rest:
            yield rest
