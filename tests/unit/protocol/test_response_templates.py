"""Produce responses from templates (korvet/protocol/response_templates.py) are byte for byte
kio's encoding of the same response, for every version Korvet serves: a client cannot tell
which path wrote its response."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from korvet.core.api_keys import ApiKey
from korvet.protocol import framing
from korvet.protocol.framing import encode_response, response_class
from korvet.protocol.kbuild import has_field, make, maybe_nested, nested
from korvet.protocol.response_templates import ProduceAnswer, ProduceTemplates
from korvet.server.api import declared
from tests.support.examples import examples

VERSIONS = declared(ApiKey.PRODUCE).versions

_INT64 = st.integers(-(2**63), 2**63 - 1)
_CODES = st.sampled_from([ErrorCode.none, ErrorCode.not_leader_or_follower,
                          ErrorCode.corrupt_message, ErrorCode.out_of_order_sequence_number,
                          ErrorCode.duplicate_sequence_number, ErrorCode.unknown_topic_or_partition])


def _response(version: int, topics: list[tuple[str, list[tuple[int, Any, int, int]]]],
              message: str | None = None, append_time: int = -1) -> Any:
    cls = response_class(0, version)
    topic_cls = nested(cls, "TopicProduceResponse")
    partition_cls = nested(cls, "PartitionProduceResponse")
    error_cls = maybe_nested(cls, "BatchIndexAndErrorMessage")
    return make(cls, throttle_time=0, responses=tuple(
        make(topic_cls, name=name, topic_id=None, partition_responses=tuple(
            make(partition_cls, index=index, error_code=code, base_offset=base,
                 log_append_time=append_time, log_start_offset=start,
                 record_errors=(make(error_cls, batch_index=0, batch_index_error_message="x"),)
                 if message and error_cls else (),
                 error_message=message if has_field(partition_cls, "error_message") else None)
            for index, code, base, start in partitions))
        for name, partitions in topics))


def _kio(correlation_id: int, response: Any) -> bytes:
    return framing._encode_with_kio(correlation_id, response)  # the reference


_PARTITIONS = st.lists(st.tuples(st.integers(0, 2**31 - 1), _CODES, _INT64, _INT64),
                       min_size=1, max_size=3, unique_by=lambda p: p[0])
_TOPICS = st.lists(st.tuples(st.sampled_from(["t", "orders", "a.b-c_d"]), _PARTITIONS),
                   min_size=1, max_size=2, unique_by=lambda t: t[0])


@settings(max_examples=examples(2), deadline=None)
@given(version=st.sampled_from(list(VERSIONS)), topics=_TOPICS,
       later=st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), _CODES, _INT64, _INT64),
                      min_size=1, max_size=4),
       correlation=st.integers(-(2**31), 2**31 - 1))
def test_template_bytes_are_kio_bytes(version: int, topics: list[Any], later: list[Any],
                                      correlation: int) -> None:
    """The first response of a shape makes the template; every later response of that shape
    (other error codes, offsets, correlation ids) comes out exactly as kio writes it."""
    templates = ProduceTemplates(_kio)
    first = _response(version, topics)
    assert templates.encode(correlation, first) == _kio(correlation, first)
    assert templates.usable() == 1  # the template is used, not kio every time
    for correlation_id, code, base, start in later:
        again = _response(version, [(name, [(index, code, base, start) for index, *_ in parts])
                                     for name, parts in topics])
        assert templates.encode(correlation_id, again) == _kio(correlation_id, again)


@settings(max_examples=examples(1), deadline=None)
@given(version=st.sampled_from(list(VERSIONS)), base=_INT64,
       message=st.sampled_from([None, "batch refused"]),
       append_time=st.sampled_from([-1, 1_700_000_000_000]))
def test_other_shapes_are_kio_bytes(version: int, base: int, message: str | None,
                                    append_time: int) -> None:
    """Responses with messages, per-record errors or a LogAppendTime are their own shapes:
    never filled into the template of a plain response."""
    plain = _response(version, [("t", [(0, ErrorCode.none, 5, 0)])])
    encode_response(1, plain)  # the shared templates know the plain shape now
    other = _response(version, [("t", [(0, ErrorCode.corrupt_message, base, 0)])],
                      message=message, append_time=append_time)
    assert encode_response(9, other) == _kio(9, other)


def test_log_append_time_shape() -> None:
    """A LogAppendTime response (a datetime in the kio object) still encodes as kio does."""
    response = _response(9, [("t", [(0, ErrorCode.none, 5, 0)])], append_time=1_700_000_000_000)
    assert isinstance(response.responses[0].partition_responses[0].log_append_time,
                      datetime.datetime)
    assert encode_response(3, response) == _kio(3, response)


# A request names its topics (v3-12) or gives their ids (v13+); the response echoes them.
_NAMED = st.tuples(st.sampled_from(["t", "orders", "a.b-c_d"]), st.none())
_BY_ID = st.tuples(st.none(), st.sampled_from([uuid.UUID(int=0), uuid.UUID(int=7),
                                               uuid.UUID(int=2**128 - 1)]))


@settings(max_examples=examples(2), deadline=None)
@given(version=st.sampled_from(list(VERSIONS)), data=st.data(),
       rounds=st.lists(st.integers(-(2**31), 2**31 - 1), min_size=1, max_size=3))
def test_answer_bytes_are_kio_bytes(version: int, data: st.DataObject, rounds: list[int]) -> None:
    """A ProduceAnswer (the handler's plain response, no kio objects) is kio's object as the
    handler built it before (``to_kio``, compared with the test's own build) and comes out as
    kio writes that object, whether the template of its shape is new or reused."""
    drawn = data.draw(st.lists(st.tuples(
        _BY_ID if version >= 13 else _NAMED,
        st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=3)), min_size=1, max_size=3))
    topics = [(name, topic_id, indexes) for (name, topic_id), indexes in drawn]
    templates = ProduceTemplates(_kio)
    cls = response_class(0, version)
    shape = tuple((name, topic_id, tuple(indexes)) for name, topic_id, indexes in topics)
    for correlation in rounds:
        values = [data.draw(st.tuples(_CODES.map(int), _INT64, _INT64))
                  for _, _, indexes in topics for _ in indexes]
        answer = ProduceAnswer(cls, shape, values)
        got = iter(values)
        expected = make(cls, throttle_time=0, responses=tuple(
            make(nested(cls, "TopicProduceResponse"), name=name,
                 topic_id=topic_id or uuid.UUID(int=0), partition_responses=tuple(
                     make(nested(cls, "PartitionProduceResponse"), index=index,
                          error_code=code, base_offset=base, log_append_time=-1,
                          log_start_offset=start, record_errors=(), error_message=None)
                     for index, (code, base, start) in zip(indexes, got, strict=False)))
            for name, topic_id, indexes in topics))
        assert answer.to_kio() == expected
        assert templates.encode_answer(correlation, answer) == _kio(correlation, expected)
        assert encode_response(correlation, answer) == _kio(correlation, expected)
    assert templates.usable() == 1  # the shape's template was kept and reused
