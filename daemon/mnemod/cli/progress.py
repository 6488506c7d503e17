"""Progress on a terminal for what takes a while (reading a big index, import, export, gc,
dedupe --report, the daemon's start-up), drawn by tqdm on stderr; nothing at all when
stderr is not a terminal, so pipes, logs and `--json` consumers see only the output.

A bar appears only after `DELAY` seconds, so quick commands never flash one, and it is
erased when its step ends. Log lines written meanwhile go around it (`AroundBars`).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from mnemod.cli.terminal import is_terminal

if TYPE_CHECKING:  # imported when a bar is made: every command imports this module
    from tqdm import tqdm

T = TypeVar("T")
DELAY = 0.5
"""Seconds a step must last before its bar is drawn."""
REFRESH = 0.2
"""Seconds between redraws of a step without a count (its elapsed time moves on)."""


def _on_screen(bar: tqdm[Any]) -> bool:
    """A bar that is drawn: enabled, and past its delay."""
    start = getattr(bar, "start_t", None)
    return not bar.disable and start is not None and time.time() >= start + bar.delay


def _bar(label: str, stream: TextIO, total: int | None, delay: float, **extra: Any) -> tqdm[Any]:
    from tqdm import tqdm

    return tqdm(
        desc=f"mnemod: {label}",
        total=total,
        file=stream,
        leave=False,
        delay=delay,
        mininterval=REFRESH,
        dynamic_ncols=True,
        disable=not is_terminal(stream),
        **extra,
    )


def counting(
    items: Iterable[T],
    label: str,
    total: int | None = None,
    unit: str = "entries",
    stream: TextIO | None = None,
    delay: float = DELAY,
) -> Iterator[T]:
    """`items`, with a bar counting them (of `total`, when known) on a terminal."""
    with _bar(label, stream or sys.stderr, total, delay, unit=f" {unit}") as bar:
        for item in items:
            yield item
            bar.update()


@contextmanager
def phase(label: str, stream: TextIO | None = None, delay: float = DELAY) -> Iterator[None]:
    """A step without a count: its name and the time it has taken so far, on a terminal."""
    out = stream or sys.stderr
    if not is_terminal(out):
        yield
        return
    spinner = Spinner(label, out, delay)
    spinner.start()
    try:
        yield
    finally:
        spinner.stop()


class Spinner:
    """`phase` for steps that start and end in different places (the daemon's start-up)."""

    def __init__(self, label: str, stream: TextIO | None = None, delay: float = DELAY) -> None:
        self.stream = stream or sys.stderr
        self.label = label
        self.delay = delay
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if not is_terminal(self.stream) or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._draw, name="mnemod-progress", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def _draw(self) -> None:
        # tqdm draws on updates only: redraw the elapsed time until stopped
        bar = _bar(self.label, self.stream, None, self.delay, bar_format="{desc} {elapsed}")
        with bar:
            while not self._stopped.wait(REFRESH):
                bar.update(0)  # draws once the delay has passed


class AroundBars:
    """A terminal stream whose writes erase the bars on the screen first and draw them again
    after, so that a log line never lands in the middle of a bar. (tqdm's own
    `external_write_mode` would also draw bars still inside their delay.)"""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        if "tqdm" not in sys.modules:  # no bar was ever made: none to move aside
            written = self.stream.write(text)
            self.stream.flush()
            return written
        from tqdm import tqdm

        with tqdm.get_lock():  # type: ignore[no-untyped-call]
            shown = [bar for bar in getattr(tqdm, "_instances", ()) if _on_screen(bar)]
            for bar in shown:
                bar.clear(nolock=True)
            written = self.stream.write(text)
            self.stream.flush()
            for bar in shown:
                bar.refresh(nolock=True)
        return written

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return is_terminal(self.stream)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        attribute: Callable[..., Any] = getattr(self.stream, name)
        return attribute
