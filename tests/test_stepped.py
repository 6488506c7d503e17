"""store.stepped.Stepped: a run of steps ends before one that would overrun its time."""

from __future__ import annotations

from collections.abc import Generator

from mnemod.store.stepped import Stepped


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def steps(clock: Clock, lengths: list[float]) -> Generator[None, None, int]:
    for length in lengths:
        clock.now += length
        yield
    return len(lengths)


def test_a_run_ends_before_a_step_that_would_overrun_it() -> None:
    """Steps of 4 in a run of 10: two (to 8; a third would end at 12), not three."""
    clock = Clock()
    stepped = Stepped(steps(clock, [4.0] * 6), clock=clock)
    assert not stepped.run(10.0)
    assert clock.now == 8.0
    assert not stepped.run(10.0)
    assert clock.now == 16.0
    assert not stepped.run(10.0)
    assert clock.now == 24.0
    assert stepped.run(10.0) and stepped.result == 6  # the generator returns
    assert stepped.longest_step == 4.0


def test_a_run_takes_one_step_at_least_and_all_without_a_time() -> None:
    clock = Clock()
    stepped = Stepped(steps(clock, [30.0, 1.0, 1.0]), clock=clock)
    assert not stepped.run(10.0)
    assert clock.now == 30.0  # one step, however long
    assert stepped.run(None) and stepped.result == 3
