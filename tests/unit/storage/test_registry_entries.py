"""The broker registry's entries: every listener's advertised address, read back as
written, and the address a client of one listener is told (Kafka's rule: the listener
of the same name; none, the broker is left out)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from korvet.storage.leases import BrokerEntry
from tests.support.examples import examples

names = st.from_regex(r"[A-Z][A-Z0-9_]{0,11}", fullmatch=True)
hosts = st.sampled_from(["127.0.0.1", "broker-1.example", "::1", "10.0.0.7"])
ports = st.integers(1, 65535)
listeners = st.lists(st.tuples(names, hosts, ports), max_size=4, unique_by=lambda one: one[0])


@settings(max_examples=examples(1))
@given(st.integers(0, 2**31 - 1), listeners, st.one_of(st.none(), st.just("rack-a")))
def test_an_entry_reads_back_as_it_was_written(node_id: int,
                                               entry_listeners: list[tuple[str, str, int]],
                                               rack: str | None) -> None:
    first = entry_listeners[0] if entry_listeners else ("", "127.0.0.1", 9092)
    entry = BrokerEntry(node_id, first[1], first[2], rack, tuple(entry_listeners))
    assert BrokerEntry.from_json(node_id, entry.to_json()) == entry


@settings(max_examples=examples(1))
@given(listeners.filter(bool), names)
def test_a_client_of_a_listener_is_told_that_listeners_address(
        entry_listeners: list[tuple[str, str, int]], other: str) -> None:
    entry = BrokerEntry(4, entry_listeners[0][1], entry_listeners[0][2], None,
                        tuple(entry_listeners))
    for name, host, port in entry_listeners:
        found = entry.at(name)
        assert found is not None and (found.host, found.port) == (host, port)
        assert found.node_id == 4
    if other not in {name for name, _, _ in entry_listeners}:
        assert entry.at(other) is None


def test_an_entry_without_listeners_answers_with_its_one_address() -> None:
    old = BrokerEntry.from_json(2, '{"host": "h", "port": 9092, "rack": null}')
    assert old.at("SASL_SSL") == old


@pytest.mark.parametrize("text", ["[]", '{"host": "h"}', '{"host": "h", "port": 1, '
                                  '"listeners": {"A": ["h"]}}', "not json"])
def test_an_unreadable_entry_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        BrokerEntry.from_json(1, text)
