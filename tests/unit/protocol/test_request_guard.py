"""The array-count guard in front of kio's reader (korvet/protocol/guard.py).

kio's native reader sizes an array from its count before reading it; a count of billions in a
request of a few bytes made the allocation fail and the broker process abort. The guard walks
every request body first. These tests check that it reads every valid request as kio does
(the same end, never a refusal) and that frames announcing impossible counts are refused as
malformed: were one to reach kio, the test process itself would abort.
"""

from __future__ import annotations

import contextlib
import io
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_request_schema
from kio.schema.index import api_key_map
from kio.serial import entity_writer

from korvet.conformance.kafka.messages import build
from korvet.conformance.kafka.schemas import kio_request_versions, request_schema
from korvet.conformance.modes.fuzz import request_strategy
from korvet.protocol import guard
from korvet.protocol.framing import FrameError, parse_request
from tests.support.examples import examples

CASES = sorted({(key, version) for key in api_key_map
                for version in (kio_request_versions(key)[:1] + kio_request_versions(key)[-1:])})


def _body(api_key: int, version: int, document: dict[str, Any]) -> bytes:
    cls = load_request_schema(api_key, version)
    buffer = io.BytesIO()
    entity_writer(cls)(buffer, build(cls, document))
    return buffer.getvalue()


@pytest.mark.parametrize(("api_key", "version"), CASES)
def test_the_guard_ends_every_valid_request_where_kio_does(api_key: int, version: int) -> None:
    schema = request_schema(api_key, version, max_string=8, max_bytes=8, max_items=3)

    @settings(max_examples=examples(0.1), deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(request_strategy(schema))
    def prop(document: dict[str, Any]) -> None:
        body = _body(api_key, version, document)
        assert guard.body_end(api_key, version, memoryview(body), 0) == len(body)

    prop()


# Frames (without their size prefix) that made kio's reader abort the process.
ABORTED = {
    # Metadata v12, topics announcing 4,294,967,294 entries (a helper's trial, 29 bytes)
    "metadata v12": "0003000c00000001000178" "00" "ffffffff0f" "0000000000000000",
    # Metadata v4 (not flexible): an int32 count of 2,147,483,647 topics
    "metadata v4": "0003000400000001000178" "7fffffff" "00",
    # DeleteRecords v2: one topic whose partitions announce 4,294,967,294 entries
    "delete records v2": "0015000200000007000178" "00" "02" "0274" "ffffffff0f",
}


@pytest.mark.parametrize("name", sorted(ABORTED))
def test_an_impossible_array_count_is_a_malformed_request(name: str) -> None:
    with pytest.raises(FrameError, match=r"announces \d+ entries, more than the"):
        parse_request(bytes.fromhex(ABORTED[name]))


@pytest.mark.parametrize(("frame", "field"), [
    # DescribeConfigs v1, resources null: its handler failed with a TypeError and a traceback
    ("0020000100000001000178" "ffffffff" "00", "resources"),
    # DescribeProducers v0 (flexible), topics null
    ("003d000000000001000178" "00" "00" "00", "topics"),
    # CreateTopics v4, a topic whose name is null
    ("0013000400000001000178" "00000001" "ffff" "00000001" "0001" "00000000" "00000000"
     "00000000" "00", "name"),
])
def test_a_null_where_kafka_allows_none_is_a_malformed_request(frame: str, field: str) -> None:
    """Kafka refuses a non-nullable field sent as null ("non-nullable field ... was
    serialized as null") and closes the connection; kio read it as None and the handler
    then failed."""
    with pytest.raises(FrameError, match=f"non-nullable field {field} was serialized as null"):
        parse_request(bytes.fromhex(frame))


@pytest.mark.parametrize(("api_key", "version"), [(0, 9), (0, 13), (1, 12), (1, 17), (3, 12),
                                                  (8, 9), (11, 9), (19, 7), (21, 2), (32, 4)])
def test_a_request_with_any_four_bytes_overwritten_never_aborts(api_key: int, version: int) -> None:
    """Overwrite four bytes anywhere in a valid request with a huge count (int32 or uvarint):
    the broker's parser reads it or refuses it, and this process lives on."""
    schema = request_schema(api_key, version, max_string=8, max_bytes=8, max_items=2)

    @settings(max_examples=examples(0.3), deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(request_strategy(schema), st.data())
    def prop(document: dict[str, Any], data: st.DataObject) -> None:
        body = _body(api_key, version, document)
        header = (api_key.to_bytes(2, "big") + version.to_bytes(2, "big") + b"\0\0\0\1"
                  + b"\0\1x")
        if load_request_schema(api_key, version).__header_schema__.__flexible__:
            header += b"\0"
        frame = bytearray(header + body)
        at = data.draw(st.integers(len(header), max(len(header), len(frame) - 1)))
        huge = data.draw(st.sampled_from([b"\x7f\xff\xff\xff", b"\xff\xff\xff\xff\x0f",
                                          b"\xfe\xff\xff\xff\x0f", b"\x40\x00\x00\x00"]))
        frame[at:at + len(huge)] = huge
        with contextlib.suppress(FrameError):
            parse_request(bytes(frame))

    prop()
