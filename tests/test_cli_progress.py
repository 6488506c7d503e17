"""Progress for long steps: drawn on a terminal and erased when the step ends; nothing on a
pipe. Drawing is checked on a stream that says it is a terminal; the commands themselves
run on a pseudo-terminal and on a pipe."""

from __future__ import annotations

import io
import threading
from pathlib import Path

import pytest

from helpers import run_cli, wait_until
from mnemod.cli.progress import AroundBars, Spinner, counting, phase
from mnemod.cli.run_cmd import ReadyStops
from mnemod.runtime.sdnotify import Notifier
from test_cli_terminal import on_a_terminal


class Terminal(io.StringIO):
    """What a terminal of 80 columns was sent."""

    def isatty(self) -> bool:
        return True


class Pipe(io.StringIO):
    def isatty(self) -> bool:
        return False


def test_a_count_is_drawn_on_a_terminal_and_erased_after() -> None:
    screen = Terminal()
    assert list(counting(range(5), "exporting", total=5, stream=screen, delay=0)) == [0, 1, 2, 3, 4]
    drawn = screen.getvalue()
    assert "mnemod: exporting:   0%" in drawn and "0/5" in drawn
    assert drawn.endswith("\r")  # erased: the next output starts on a clean line


def test_nothing_is_drawn_on_a_pipe() -> None:
    pipe = Pipe()
    assert list(counting(range(5), "exporting", total=5, stream=pipe, delay=0)) == list(range(5))
    with phase("reading the index", stream=pipe, delay=0):
        pass
    assert pipe.getvalue() == ""


def test_a_phase_shows_its_elapsed_time_until_it_ends() -> None:
    screen = Terminal()
    with phase("reading the index", stream=screen, delay=0):
        wait_until(lambda: "mnemod: reading the index 00:00" in screen.getvalue(), timeout=5)
    assert screen.getvalue().endswith("\r")


def test_a_quick_step_draws_nothing() -> None:
    screen = Terminal()
    with phase("reading the index", stream=screen, delay=60):
        pass
    assert list(counting(range(3), "exporting", total=3, stream=screen, delay=60)) == [0, 1, 2]
    assert screen.getvalue() == ""


def test_log_lines_go_around_a_bar() -> None:
    screen = Terminal()
    spinner = Spinner("starting", stream=screen, delay=0)
    spinner.start()
    wait_until(lambda: "mnemod: starting" in screen.getvalue(), timeout=5)
    AroundBars(screen).write("a log line\n")
    spinner.stop()
    text = screen.getvalue()
    before = text[: text.index("a log line")]
    assert before.endswith("\r")  # the bar was erased before the line was written


def test_the_start_up_line_ends_when_the_daemon_is_ready() -> None:
    ended = threading.Event()
    notifier = ReadyStops(Notifier(None), ended.set)
    notifier.status("starting")
    assert not ended.is_set()
    notifier.ready("leading namespace default")
    assert ended.is_set()


def visible_lines(raw: str) -> list[str]:
    """Lines as a terminal shows them: what follows the last carriage return of each."""
    return [line.rsplit("\r", 1)[-1].rstrip() for line in raw.replace("\r\n", "\n").split("\n")]


@pytest.mark.process  # runs the CLI
def test_commands_print_clean_output_on_a_terminal_and_nothing_extra_on_a_pipe(
    tmp_path: Path,
) -> None:
    first, data = tmp_path / "first", tmp_path / "data"
    for fact in ("The build runs on Fridays", "Staging is on port 5433", "Mei uses vim"):
        run_cli(first, "add", fact)
    source = tmp_path / "in.jsonl"
    run_cli(first, "export", "-o", str(source))
    shown = visible_lines(on_a_terminal(data, "import", str(source)))
    assert [line for line in shown if line] == ["imported 3, skipped 0 already present"]
    shown = visible_lines(on_a_terminal(data, "gc", "--dry-run"))
    assert next(line for line in shown if line).startswith("dry run: expired=0")

    piped = run_cli(data, "export", "-o", str(tmp_path / "out.jsonl"))
    assert piped.stderr == f"exported 3 entries to {tmp_path / 'out.jsonl'}\n"
    assert run_cli(data, "dedupe", "--report").stderr == ""
    assert run_cli(data, "stats").stderr == ""


def test_a_log_line_does_not_draw_a_bar_still_in_its_delay() -> None:
    screen = Terminal()
    spinner = Spinner("starting", stream=screen, delay=60)
    spinner.start()
    try:
        AroundBars(screen).write("a log line\n")
    finally:
        spinner.stop()
    assert screen.getvalue() == "a log line\n"
