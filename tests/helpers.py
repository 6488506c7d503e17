"""Test helpers shared by the suite (`from helpers import wait_until`)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout: float = 5.0, interval: float = 0.02) -> T:
    """Poll `predicate` until it returns something truthy and return that; fail after
    `timeout` seconds. The way to wait on another process or thread, never a bare sleep."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            name = getattr(predicate, "__name__", repr(predicate))
            raise AssertionError(f"condition {name} not met within {timeout:g} s")
        time.sleep(interval)


@contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """`folder` read-only for a while, open files and all (a bind mount over itself)."""
    subprocess.run(["mount", "--bind", str(folder), str(folder)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], check=True)
        yield
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def run_cli(
    data_dir: Path,
    *args: str,
    now: str | None = None,
    stdin: str | None = None,
    expect: int | None = 0,
) -> subprocess.CompletedProcess[str]:
    """`mnemod ARGS` as a user runs it, in a clean environment (no MNEMOD_* of the machine)
    on `data_dir`, at the pinned time `now` if given; checks the exit code unless None."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMOD_")}
    env["MNEMOD_DATA_DIR"] = str(data_dir)
    if now is not None:
        env["MNEMOD_NOW"] = now
    done = subprocess.run(
        [sys.executable, "-m", "mnemod.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        input=stdin,
        timeout=60,
    )
    if expect is not None:
        assert done.returncode == expect, (done.returncode, done.stdout, done.stderr)
    return done
