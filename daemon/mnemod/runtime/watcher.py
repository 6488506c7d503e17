"""File watching with watchdog: L1 and L2 folders, debounced, own writes ignored.

watchdog's handlers only record the path; a debouncer thread posts one command per quiet
period. Idle cost is the observer's inotify wait: no polling.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import structlog
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from mnemod.clock import Clock
from mnemod.files.atomic import make_dirs
from mnemod.runtime.commands import Command

log = structlog.get_logger("mnemod.watcher")


class _Recorder(FileSystemEventHandler):
    def __init__(self, debouncer: Debouncer, kind: str) -> None:
        self.debouncer = debouncer
        self.kind = kind

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.is_directory or event.event_type in ("opened", "closed_no_write"):
            return
        for raw in (event.src_path, getattr(event, "dest_path", "")):
            if raw:
                path = Path(raw if isinstance(raw, str) else raw.decode())
                if not path.name.startswith("."):  # our temp files are dot-files
                    self.debouncer.touch(self.kind, path)


class Debouncer:
    """Collects touched paths; after `delay` seconds (of `clock.monotonic`) without news,
    posts commands."""

    def __init__(self, delay: float, post: Callable[[Command], None], clock: Clock) -> None:
        self.delay = delay
        self.clock = clock
        self._post = post
        self._pending: dict[tuple[str, Path], float] = {}
        self._cond = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="mnemod-debounce", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join(timeout=5)

    def touch(self, kind: str, path: Path) -> None:
        with self._cond:
            self._pending[(kind, path)] = self.clock.monotonic()
            self._cond.notify()

    def post_due(self) -> float | None:
        """Post a command for each path quiet for `delay`; the seconds until the next is
        due (None when none waits)."""
        with self._cond:
            now = self.clock.monotonic()
            due = [k for k, at in self._pending.items() if now - at >= self.delay]
            for key in due:
                del self._pending[key]
                kind, path = key
                self._post(Command(kind, path))
            if not self._pending:
                return None
            return max(0.0, self.delay - (now - min(self._pending.values())))

    def _run(self) -> None:
        with self._cond:
            while not self._stopped:
                if not self._pending:
                    self._cond.wait()
                    continue
                wait = self.post_due()
                if wait is not None:
                    self._cond.wait(timeout=max(0.01, wait))


class Watcher:
    """Watches the L1 folder (reload_l1 per file) and the L2 folder (reload_l2)."""

    def __init__(
        self,
        l1_dir: Path,
        l2_dir: Path,
        delay: float,
        post: Callable[[Command], None],
        clock: Clock,
    ) -> None:
        self.debouncer = Debouncer(delay, post, clock)
        self.observer = Observer()
        for folder, kind in ((l1_dir, "reload_l1"), (l2_dir, "reload_l2")):
            make_dirs(folder)
            self.observer.schedule(_Recorder(self.debouncer, kind), str(folder), recursive=False)
        self.folders = (l1_dir, l2_dir)

    def start(self) -> None:
        self.debouncer.start()
        self.observer.start()
        log.info("watcher.started", l1=str(self.folders[0]), l2=str(self.folders[1]))

    def stop(self) -> None:
        self.observer.stop()
        self.observer.join(timeout=5)
        self.debouncer.stop()
        log.info("watcher.stopped")
