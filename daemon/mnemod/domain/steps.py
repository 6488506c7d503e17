"""Work done a step at a time: a generator that yields between steps and returns its result,
run to its end here (the library), or for a while at a time (store.stepped.Stepped: the
daemon's maintenance slices)."""

from __future__ import annotations

from collections.abc import Generator
from typing import TypeVar, cast

T = TypeVar("T")


def run_through(steps: Generator[None, None, T]) -> T:
    """What a generator of steps returns, run to its end."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return cast(T, done.value)
