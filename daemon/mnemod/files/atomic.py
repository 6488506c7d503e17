"""Atomic file writes: temp file named per process in the same folder → fsync → os.replace →
fsync of the folder. A reader sees the old file or the new one, never half of either."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from pathlib import Path

_counter = 0
_counter_lock = threading.Lock()


def _temp_name(path: Path) -> Path:
    global _counter
    with _counter_lock:
        _counter += 1
        serial = _counter
    return path.with_name(f".{path.name}.{os.getpid()}.{serial}.tmp")


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
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = _temp_name(path)
    try:
        with temp.open("wb") as handle:
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
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write(line.rstrip("\n") + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def append_lines(path: Path, lines: list[str]) -> None:
    if not lines:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as handle:
        handle.write("".join(line.rstrip("\n") + "\n" for line in lines))
        handle.flush()
        os.fsync(handle.fileno())
