"""Produce responses from templates: kio's bytes for a response of the same shape, with the
fields that change from one response to the next written into a copy.

A connection that produces answers every request with a response of one shape: the same
topics and partitions, no error message, no per-record errors; only the correlation id, the
error codes and the offsets differ. kio's generic writer takes several times longer than
the rest of a 1 KiB-record Produce request's Python work on the response (docs/performance.md), so the
first response of a shape is encoded by kio with marker values in those fields, the
markers' positions are found, and the template is kept only if filling it with that first
response's own values gives exactly kio's bytes for it. Any other response (errors with
messages, a LogAppendTime, a shape not seen yet) is kio's, as before.

Fixed-width fields of ProduceResponse (every version Korvet serves) that are filled in:
correlation id (int32), per partition the error code (int16, just before the base offset),
base offset (int64) and log start offset (int64, versions 5+).

The Produce handler does not even build kio's objects for the common answer: a
``ProduceAnswer`` (every partition without an error message, per-record errors or a
LogAppendTime) names its shape by the request's topics and partitions and carries the filled-in
values only; ``encode_answer`` writes it from its shape's template, learnt (and checked against
kio) from ``ProduceAnswer.to_kio()`` the first time. Anything that reads the response instead
of sending it (the authorizer's merge of refused topics) asks ``to_kio()`` for kio's object.
"""

from __future__ import annotations

import dataclasses
import struct
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from korvet.protocol.kbuild import make, maybe_nested, nested

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
# The fields filled in per partition; every other field is part of the shape.
_FILLED = frozenset({"error_code", "base_offset", "log_start_offset"})
_MAX_TEMPLATES = 4096  # shapes kept (a broker sees few: one per produced topic-partition set)
_MARK = 0x6B6F72766574_0000  # b"korvet\0\0": marker base for the int64 fields


@dataclasses.dataclass(frozen=True, slots=True)
class _Template:
    data: bytes  # the frame, size prefix included, as kio wrote it with the markers
    positions: tuple[tuple[int, int, int], ...]  # per partition: error code, base, log start (-1)


Encoder = Callable[[int, Any], bytes]

_NO_TOPIC_ID = uuid.UUID(int=0)
TopicShape = tuple[str | None, uuid.UUID | None, tuple[int, ...]]  # name, id, partition indexes


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionFields:
    """Every field of a Produce response's partition, as plain values (-1: none)."""

    index: int
    error_code: int = 0
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    record_errors: tuple[tuple[int, str], ...] = ()


def produce_response(response_cls: type[Any],
                     topics: Sequence[tuple[str | None, uuid.UUID | None,
                                            Sequence[PartitionFields]]]) -> Any:
    """kio's ProduceResponse of ``response_cls``'s version from plain values."""
    topic_cls = nested(response_cls, "TopicProduceResponse")
    partition_cls = nested(response_cls, "PartitionProduceResponse")
    error_cls = maybe_nested(response_cls, "BatchIndexAndErrorMessage")
    return make(response_cls, throttle_time=0, responses=tuple(
        make(topic_cls, name=name, topic_id=topic_id or _NO_TOPIC_ID, partition_responses=tuple(
            make(partition_cls, index=p.index, error_code=p.error_code,
                 base_offset=p.base_offset, log_append_time=p.log_append_time,
                 log_start_offset=p.log_start_offset, error_message=p.error_message,
                 record_errors=tuple(make(error_cls, batch_index=i, batch_index_error_message=m)
                                     for i, m in p.record_errors) if error_cls else ())
            for p in partitions))
        for name, topic_id, partitions in topics))


@dataclasses.dataclass(frozen=True, slots=True)
class ProduceAnswer:
    """A Produce response whose partitions have no error message, no per-record errors and no
    LogAppendTime: its shape (the response class and the request's topics and partition
    indexes, in order) and per partition its error code, base offset and log start offset."""

    response_cls: type[Any]
    topics: tuple[TopicShape, ...]
    values: list[tuple[int, int, int]]

    def to_kio(self) -> Any:
        """The same response as kio's object."""
        values = iter(self.values)
        topics = []
        for name, topic_id, indexes in self.topics:
            partitions = []
            for index in indexes:
                code, base, start = next(values)
                partitions.append(PartitionFields(index, code, base, log_start_offset=start))
            topics.append((name, topic_id, partitions))
        return produce_response(self.response_cls, topics)


class ProduceTemplates:
    """Templates by response shape; ``encode`` is ``encode_response`` with the same result."""

    def __init__(self, encode: Encoder) -> None:
        self._encode = encode  # kio's: (correlation id, response) -> frame
        self._templates: dict[Any, _Template | None] = {}
        self._kept: dict[type[Any], tuple[str, ...]] = {}
        self._answers: dict[tuple[type[Any], tuple[TopicShape, ...]], _Template | None] = {}

    def encode(self, correlation_id: int, response: Any) -> bytes:
        shape = self._shape(response)
        template: _Template | None = None
        if shape is not None:
            template = self._templates.get(shape)
            if template is None and shape not in self._templates:
                template = self._learn(shape, response)
        if template is None:
            return self._encode(correlation_id, response)
        return _fill(template, correlation_id, _values(response))

    def encode_answer(self, correlation_id: int, answer: ProduceAnswer) -> bytes:
        """``encode(correlation_id, answer.to_kio())``, without building kio's objects once
        the answer's shape has a template."""
        shape = (answer.response_cls, answer.topics)
        template = self._answers.get(shape)
        if template is None:
            if shape in self._answers:  # no template for this shape: kio every time
                return self._encode(correlation_id, answer.to_kio())
            response = answer.to_kio()
            template = _build(self._encode, response)
            if len(self._answers) >= _MAX_TEMPLATES:
                self._answers.clear()
            self._answers[shape] = template
            if template is None:
                return self._encode(correlation_id, response)
        return _fill(template, correlation_id, answer.values)

    def usable(self) -> int:
        """How many shapes have a template (the others are kio's every time)."""
        return sum(template is not None
                   for kept in (self._templates, self._answers) for template in kept.values())

    def _kept_fields(self, cls: type[Any]) -> tuple[str, ...]:
        names = self._kept.get(cls)
        if names is None:
            names = tuple(f.name for f in dataclasses.fields(cls) if f.name not in _FILLED)
            self._kept[cls] = names
        return names

    def _shape(self, response: Any) -> Any:
        """Everything of the response except the filled-in fields, hashable; None when some
        value is not hashable (then no template)."""
        topics = []
        for topic in response.responses:
            partitions = tuple(
                tuple(getattr(p, name) for name in self._kept_fields(type(p)))
                for p in topic.partition_responses)
            topics.append((getattr(topic, "name", None), getattr(topic, "topic_id", None),
                           partitions))
        shape = (type(response), response.throttle_time,
                 getattr(response, "node_endpoints", None), tuple(topics))
        try:
            hash(shape)
        except TypeError:
            return None
        return shape

    def _learn(self, shape: Any, response: Any) -> _Template | None:
        template = _build(self._encode, response)
        if len(self._templates) >= _MAX_TEMPLATES:
            self._templates.clear()
        self._templates[shape] = template
        return template


def _values(response: Any) -> list[tuple[int, int, int]]:
    return [(int(p.error_code), int(p.base_offset), int(getattr(p, "log_start_offset", -1)))
            for topic in response.responses for p in topic.partition_responses]


def _fill(template: _Template, correlation_id: int, values: list[tuple[int, int, int]]) -> bytes:
    out = bytearray(template.data)
    _I32.pack_into(out, 4, correlation_id)
    for (code_at, base_at, start_at), (code, base, start) in zip(template.positions, values,
                                                                  strict=True):
        _I16.pack_into(out, code_at, code)
        _I64.pack_into(out, base_at, base)
        if start_at >= 0:
            _I64.pack_into(out, start_at, start)
    return bytes(out)


def _build(encode: Encoder, response: Any) -> _Template | None:
    """The template of ``response``'s shape, checked against kio's bytes for ``response``
    itself; None when the markers cannot be told apart (then kio encodes every time)."""
    marked_topics = []
    count = 0
    for topic in response.responses:
        partitions = []
        for p in topic.partition_responses:
            marks = {"base_offset": _MARK + 2 * count}
            if hasattr(p, "log_start_offset"):
                marks["log_start_offset"] = _MARK + 2 * count + 1
            partitions.append(dataclasses.replace(p, **marks))
            count += 1
        marked_topics.append(dataclasses.replace(topic, partition_responses=tuple(partitions)))
    try:
        marked = encode(0, dataclasses.replace(response, responses=tuple(marked_topics)))
    except Exception:  # kio refused the markers: no template, kio as before
        return None
    positions = []
    for index in range(count):
        base_at = _find_once(marked, _I64.pack(_MARK + 2 * index))
        start_at = _find_once(marked, _I64.pack(_MARK + 2 * index + 1))
        if base_at is None:
            return None
        positions.append((base_at - 2, base_at, -1 if start_at is None else start_at))
    template = _Template(marked, tuple(positions))
    if _fill(template, 0, _values(response)) != encode(0, response):
        return None
    return template


def _find_once(data: bytes, needle: bytes) -> int | None:
    at = data.find(needle)
    if at < 0 or data.find(needle, at + 1) >= 0:
        return None
    return at
