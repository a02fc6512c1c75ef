"""The Jepsen-style history checker (korvet/conformance/modes/history.py): each anomaly it finds,
and none in the histories of a correct log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from korvet.conformance.modes.history import ANOMALIES, History, analyse
from tests.support.examples import examples

T0, T1 = ("t", 0), ("t", 1)


def clean_history() -> History:
    """Two producers, sparse offsets (as Korvet's), one consumer reading everything in order."""
    h = History()
    h.send("p1", T0, "a", 1024)
    h.send("p2", T0, "b", 5120)
    h.send("p1", T0, "c", 9216)
    h.send("p1", T1, "d", 7)
    h.assign("c1")
    h.poll("c1", [(T0, 1024, "a"), (T0, 5120, "b")])
    h.poll("c1", [(T0, 9216, "c"), (T1, 7, "d")])
    return h


def found(h: History, *, drained: bool = False) -> dict[str, list[dict[str, Any]]]:
    return analyse(h, drained=drained).found()


def test_a_clean_history_with_sparse_offsets_has_no_anomaly() -> None:
    assert found(clean_history(), drained=True) == {}


def test_inconsistent_offsets_one_offset_two_values() -> None:
    h = clean_history()
    h.poll("c2", [(T0, 5120, "z")])
    result = found(h)
    assert [c["offset"] for c in result["inconsistent_offsets"]] == [5120]


def test_duplicate_one_value_at_two_offsets() -> None:
    h = clean_history()
    h.poll("c1", [(T0, 9300, "a")])
    assert found(h)["duplicate"][0]["value"] == "a"


def test_lost_write_below_the_highest_read_offset() -> None:
    h = History()
    h.send("p", T0, "a", 10)
    h.send("p", T0, "b", 20)
    h.send("p", T0, "c", 30)
    h.poll("c", [(T0, 10, "a"), (T0, 30, "c")])
    result = found(h)
    assert [c["value"] for c in result["lost_write"]] == ["b"]
    # a read that skips b is also a poll skip: b's offset is known from its acknowledgement
    assert result["poll_skip"][0]["skipped"] == 20


def test_unseen_only_counts_once_drained() -> None:
    h = History()
    h.send("p", T0, "a", 10)
    h.send("p", T0, "b", 20)
    h.poll("c", [(T0, 10, "a")])
    assert "unseen" not in found(h)
    assert "lost_write" not in found(h)  # 20 is above the highest offset read
    assert [c["value"] for c in found(h, drained=True)["unseen"]] == ["b"]


def test_unacknowledged_sends_are_never_lost_or_unseen() -> None:
    h = History()
    h.send("p", T0, "a", None)
    h.send("p", T0, "b", 5)
    h.poll("c", [(T0, 5, "b")])
    assert found(h, drained=True) == {}


def test_nonmonotonic_send_per_producer_and_partition() -> None:
    h = History()
    h.send("p", T0, "a", 50)
    h.send("q", T0, "b", 40)  # another producer: fine
    h.send("p", T1, "c", 10)  # another partition: fine
    h.send("p", T0, "d", 30)
    result = found(h)
    assert len(result["nonmonotonic_send"]) == 1
    assert result["nonmonotonic_send"][0]["later"] == "d@30"


def test_nonmonotonic_poll_within_and_between_polls() -> None:
    h = clean_history()
    h.poll("c1", [(T0, 1024, "a")])  # back to the start without an assignment event
    assert found(h)["nonmonotonic_poll"][0]["offset"] == 1024


def test_an_assignment_allows_going_back() -> None:
    h = clean_history()
    h.assign("c1", [T0])
    h.poll("c1", [(T0, 1024, "a"), (T0, 5120, "b")])
    assert found(h) == {}


def test_poll_skip_over_an_offset_another_consumer_read() -> None:
    h = History()
    h.poll("c1", [(T0, 1, "a"), (T0, 2, "b"), (T0, 3, "c")])
    h.poll("c2", [(T0, 1, "a")])
    h.poll("c2", [(T0, 3, "c")])
    result = found(h)
    assert result["poll_skip"] == [{"process": "c2", "partition": "t-0", "from_offset": 1, "to_offset": 3,
                                    "skipped": 2}]
    assert set(result) == {"poll_skip"}


def test_allowed_anomalies_are_not_reported() -> None:
    h = clean_history()
    h.poll("c1", [(T0, 1024, "a")])
    analysis = analyse(h)
    assert analysis.found(allowed=["nonmonotonic_poll"]) == {}
    assert "nonmonotonic_poll" in analysis.summary()


def test_every_anomaly_has_a_synthetic_history_above() -> None:
    source = Path(__file__).read_text()
    for name in ANOMALIES:
        assert f'"{name}"' in source, f"no test exercises {name}"


@given(st.lists(st.tuples(st.sampled_from(["p1", "p2"]), st.integers(0, 1), st.integers(1, 5)), max_size=30))
@settings(max_examples=examples(0.6), deadline=None, database=None)
def test_histories_of_a_correct_log_have_no_anomalies(plan: list[tuple[str, int, int]]) -> None:
    """Model: appends to a sparse log (gaps of 1..5) read back in order by one consumer."""
    h = History()
    ends = {0: 0, 1: 0}
    log: dict[int, list[tuple[int, str]]] = {0: [], 1: []}
    for index, (producer, partition, gap) in enumerate(plan):
        offset = ends[partition] + gap
        ends[partition] = offset
        value = f"{producer}-{index}"
        log[partition].append((offset, value))
        h.send(producer, ("t", partition), value, offset)
    for partition, entries in log.items():
        h.poll("c", [(("t", partition), offset, value) for offset, value in entries])
    assert analyse(h, drained=True).found() == {}
