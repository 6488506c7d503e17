"""The writer's batch size: larger while reads come back full and batches stay quick."""

from __future__ import annotations

from mnemod.runtime.batching import BUDGET_SECONDS, MAX_GROWTH, BatchSize


def test_full_quick_batches_double_the_count_up_to_its_bound() -> None:
    size = BatchSize(200)
    counts = [size.taken(size.count, BUDGET_SECONDS / 2, 200) for _ in range(5)]
    assert counts == [400, 800, 1600, 200 * MAX_GROWTH, 200 * MAX_GROWTH]


def test_a_short_read_goes_back_to_the_setting() -> None:
    size = BatchSize(200)
    size.taken(200, 0.0, 200)
    assert size.taken(399, 0.0, 200) == 200


def test_a_slow_batch_halves_the_count_never_below_the_setting() -> None:
    size = BatchSize(200)
    size.taken(200, 0.0, 200)
    size.taken(400, 0.0, 200)
    assert size.taken(800, BUDGET_SECONDS * 1.5, 200) == 800  # neither quick nor slow
    assert size.taken(800, BUDGET_SECONDS * 3, 200) == 400
    assert size.taken(400, BUDGET_SECONDS * 3, 200) == 200
    assert size.taken(200, BUDGET_SECONDS * 3, 200) == 200


def test_a_changed_setting_is_followed() -> None:
    size = BatchSize(200)
    assert size.taken(200, BUDGET_SECONDS * 3, 500) == 500
    assert size.taken(10, 0.0, 50) == 50
