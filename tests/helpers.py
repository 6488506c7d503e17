"""Test helpers shared by the suite (`from helpers import wait_until`)."""

from __future__ import annotations

import time
from collections.abc import Callable
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
