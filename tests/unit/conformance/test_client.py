"""The client floor (korvet/conformance/kafka/): JSON Schemas derived from kio's classes,
requests built from plain values, frames both ways, and operations that fail on their own terms."""

from __future__ import annotations

from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest

from korvet.conformance.harness.outcomes import CheckFailed
from korvet.conformance.kafka.messages import MessageError, build, build_request, error_name, to_plain
from korvet.conformance.kafka.ops import Ops
from korvet.conformance.kafka.schemas import api_name, kio_request_versions, narrow, request_schema
from korvet.conformance.kafka.session import ApiTable, KafkaCallFailed
from korvet.conformance.kafka.wire import WireClient, decode_response, encode_request
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode
from korvet.protocol.framing import encode_response, parse_request

SAMPLED_APIS = (0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 19, 22, 32, 42, 47, 60)


@pytest.mark.parametrize("api_key", SAMPLED_APIS)
def test_request_schemas_are_valid_json_schema(api_key: int) -> None:
    for version in kio_request_versions(api_key):
        schema = request_schema(api_key, version)
        jsonschema.Draft7Validator.check_schema(schema)
        assert schema["additionalProperties"] is False


def test_schema_types_follow_kafka_field_types() -> None:
    schema = request_schema(11, 9)
    props = schema["properties"]
    assert props["group_id"]["type"] == "string"
    assert props["group_instance_id"]["anyOf"][0] == {"type": "null"}
    assert props["session_timeout"]["minimum"] == -(2**31)
    assert props["protocols"]["items"]["properties"]["metadata"]["items"]["maximum"] == 255
    assert "reason" not in schema["required"]  # it has a default
    produce = request_schema(0, 13)
    partition = produce["properties"]["topic_data"]["items"]["properties"]["partition_data"]["items"]
    assert partition["properties"]["index"] == {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1,
                                                "description": "int32"}
    topic_id = produce["properties"]["topic_data"]["items"]["properties"]["topic_id"]
    assert "pattern" in topic_id


def test_narrow_replaces_nested_fields_and_ignores_missing_paths() -> None:
    schema = request_schema(3, 12)
    narrowed = narrow(schema, "topics.*.name", {"const": "x"})
    topic = narrowed["properties"]["topics"]["anyOf"][1]["items"]
    assert topic["properties"]["name"] == {"const": "x"}
    assert schema["properties"]["topics"]["anyOf"][1]["items"]["properties"]["name"] != {"const": "x"}
    assert narrow(schema, "no.such.field", {"const": 1}) == schema
    removed = narrow(schema, "allow_auto_topic_creation", None)
    assert "allow_auto_topic_creation" not in removed["properties"]


def test_build_fills_defaults_converts_types_and_drops_unknown_fields() -> None:
    request = build_request(11, 5, group_id="g", session_timeout=10_000, member_id="",
                            protocol_type="consumer", protocols=[{"name": "range", "metadata": [1, 2]}],
                            reason="only in v8+")
    assert request.session_timeout.total_seconds() == 10.0
    assert request.rebalance_timeout.total_seconds() == -0.001
    assert request.protocols[0].metadata == b"\x01\x02"
    with pytest.raises(MessageError, match="group_id"):
        build_request(11, 5, session_timeout=1, member_id="", protocol_type="c", protocols=[])


def test_request_frames_decode_with_the_brokers_parser() -> None:
    request = build_request(3, 12, topics=[{"name": "t", "topic_id": "00000000-0000-0000-0000-000000000000"}],
                            allow_auto_topic_creation=False, include_topic_authorized_operations=False)
    frame = encode_request(request, 42, "unit")
    parsed = parse_request(frame[4:])
    header = (parsed.api_key, parsed.api_version, parsed.correlation_id, parsed.client_id)
    assert header == (3, 12, 42, "unit")
    assert to_plain(parsed.body) == to_plain(request)


def test_response_frames_decode() -> None:
    from kio.index import load_response_schema

    response = build(load_response_schema(18, 3), {"error_code": 0, "api_keys": [
        {"api_key": 18, "min_version": 0, "max_version": 3}], "throttle_time": 0})
    frame = encode_response(7, response)
    correlation, decoded = decode_response(18, 3, frame[4:])
    assert correlation == 7
    assert decoded.api_keys[0].max_version == 3


# -- operations stand on a session, not on the harness --------------------------------


class BareSession:
    """The least a caller of the operations provides: no harness, no check, no broker."""

    def __init__(self, advertised: dict[int, tuple[int, int]]) -> None:
        self.apis = ApiTable(advertised)
        self.host, self.port = "127.0.0.1", 1
        self.notes: dict[str, Any] = {}
        self.names = 0

    def client(self, host: str | None = None, port: int | None = None, *,
               client_id: str | None = "unit", timeout: float | None = None) -> WireClient:
        raise AssertionError("no connection is needed here")

    def name(self, kind: str = "t") -> str:
        self.names += 1
        return f"unit-{kind}{self.names}"

    def note(self, key: str, value: Any) -> None:
        self.notes[key] = value


def test_an_operation_the_broker_does_not_offer_fails_on_the_clients_terms() -> None:
    """``Ops`` works for any ``Session``; when it cannot go on it raises the client floor's
    KafkaCallFailed (which the harness reports as the check's failure), never a harness error."""
    ops = Ops(BareSession({ApiKey.FETCH: (4, 7)}))
    assert ops.v(ApiKey.FETCH) == 7
    assert ops.v(ApiKey.FETCH, hi=5) == 5
    with pytest.raises(KafkaCallFailed, match=r"does not advertise Fetch \(key 1\) in v12-max "
                                              r"\(ApiVersions lists it v4-7\)") as fetch:
        ops.v(ApiKey.FETCH, lo=12)
    with pytest.raises(KafkaCallFailed, match=r"does not advertise JoinGroup \(key 11\) in v0-max "
                                              r"\(ApiVersions lists it not at all\)") as join:
        ops.v(ApiKey.JOIN_GROUP)
    assert not isinstance(fetch.value, CheckFailed) and not isinstance(join.value, CheckFailed)


def test_names_of_apis_and_errors_are_kafkas_from_the_one_vocabulary() -> None:
    assert api_name(ApiKey.LIST_OFFSETS) == "ListOffsets" == ApiKey.LIST_OFFSETS.kafka_name
    assert api_name(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS) == "DescribeUserScramCredentials"
    assert api_name(10_000) == "api 10000"
    assert error_name(ErrorCode.UNKNOWN_MEMBER_ID) == "UNKNOWN_MEMBER_ID (25)"
    assert error_name(0) == "NONE (0)"
    assert error_name(10_000) == "error 10000"
