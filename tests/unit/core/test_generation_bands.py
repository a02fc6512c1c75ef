"""Generation bands (korvet/core/coordinator/durability.py) against the protocol's int32
generations: every band's generations fit, the load after the last band opens band 1, and
a raise then moves every group into the new band, whatever its generation
(docs/spec/group-coordinator.md, "Bands wrap")."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from korvet.core.coordinator import durability
from korvet.core.coordinator.durability import BAND, MAX_BAND, CoordinatorRecord, load_plan
from korvet.core.coordinator.machine import raise_generation
from korvet.core.coordinator.state import Config, CoordinatorState, Group

INT32_MAX = 2**31 - 1


def _lossy_load(bands: int) -> CoordinatorRecord:
    plan = load_plan(CoordinatorRecord(bands, bands * BAND, "old-run", False), "new-run",
                     fsync_always=False, has_groups=True)
    assert plan.lossy
    return plan.record


@given(st.integers(min_value=0, max_value=MAX_BAND))
def test_every_band_opened_holds_only_int32_generations(bands: int) -> None:
    record = _lossy_load(bands)
    assert 1 <= record.bands <= MAX_BAND
    assert record.floor == record.bands * BAND
    assert record.floor + BAND - 1 <= INT32_MAX  # the band's last generation
    assert record.bands == (bands + 1 if bands < MAX_BAND else 1)


def test_the_load_after_the_last_band_opens_band_one() -> None:
    assert (MAX_BAND + 1) * BAND > INT32_MAX  # the band a plain count would open
    assert _lossy_load(MAX_BAND).floor == BAND


def test_a_record_past_the_last_band_is_raised_into_band_one_at_any_load() -> None:
    """Left by a version without the wrap: raised even when Redis lost nothing."""
    past = CoordinatorRecord(MAX_BAND + 1, (MAX_BAND + 1) * BAND, "same-run", True)
    plan = load_plan(past, "same-run", fsync_always=True, has_groups=True)
    assert plan.lossy and plan.record.floor == BAND


@given(st.integers(min_value=0, max_value=INT32_MAX), st.integers(min_value=1, max_value=MAX_BAND))
def test_a_raise_moves_an_empty_group_to_the_new_band_from_any_generation(
        generation: int, band: int) -> None:
    floor = band * BAND
    group = Group("g", generation=generation)
    raised = raise_generation(group, floor, Config(), 0)
    assert raised.generation == floor
    state = durability.raise_generations(
        CoordinatorState(config=Config(), groups={"g": group},
                                    generation_floor=MAX_BAND * BAND), floor, 0)
    assert state.generation_floor == floor and state.groups["g"].generation == floor
