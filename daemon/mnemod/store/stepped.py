"""Work done a step at a time, run for a while at a time (the daemon's maintenance slices:
runtime.maintenance) or to its end: a generator that yields between steps and returns its
result (domain.steps)."""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from typing import Generic, TypeVar, cast

T = TypeVar("T")


class Stepped(Generic[T]):
    """A generator of steps run `run(seconds)` at a time; `result` once it returned.

    A run ends before a step that would take it past its time, judged by the step before
    (steps of one kind take about as long), not after it: a slice of the daemon's writer
    holds a request for about its time, not its time and a step more."""

    def __init__(
        self, steps: Generator[None, None, T], clock: Callable[[], float] = time.perf_counter
    ) -> None:
        self._steps = steps
        self._clock = clock
        self.finished = False
        self._result: T | None = None
        self.busy_seconds = 0.0  # spent in `run`
        self.longest_step = 0.0  # the longest stretch between two yields, seconds

    @property
    def result(self) -> T | None:
        return self._result

    def run(self, seconds: float | None, enough: Callable[[], bool] | None = None) -> bool:
        """Up to about `seconds` of steps (all of them with None; at least one), or fewer
        once `enough()` says so after one; True once done."""
        clock = self._clock
        began = last = clock()
        deadline = began + seconds if seconds is not None else float("inf")
        while not self.finished:
            try:
                next(self._steps)
            except StopIteration as done:
                self._result, self.finished = cast(T, done.value), True
            now = clock()
            step, last = now - last, now
            self.longest_step = max(self.longest_step, step)
            if now + step > deadline or (enough is not None and enough()):
                break
        self.busy_seconds += clock() - began
        return self.finished
