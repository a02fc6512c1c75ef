"""Kafka wire framing: size-prefixed frames, request headers, response encoding.

A request frame is ``int32 size`` followed by ``size`` bytes: the request
header (api key, api version, correlation id, client id, and tagged fields in
the flexible header v2) and the request body. kio's generated classes say which
header version each request and response uses (``__header_schema__``), so this
module never hard-codes the flexible-version table.
"""

from __future__ import annotations

import dataclasses
import io
import struct
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio._kio_native import get_field_reader
from kio.index import load_request_schema, load_response_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from korvet.protocol.fetch_response import Buffer, FetchAnswer, join
from korvet.protocol.guard import check_counts
from korvet.protocol.response_templates import ProduceAnswer, ProduceTemplates

_PREFIX = struct.Struct(">hhi")  # api key, api version, correlation id
_SIZE = struct.Struct(">i")
_INT64 = struct.Struct(">q")
# kio reads an int64 duration (OffsetCommit v2-v4's retention_time, the delegation token
# periods) as a datetime.timedelta through its microseconds in an int64: about +-292,000 years,
# narrower than int64 milliseconds. Kafka takes any int64 there.
DURATION_MAX_MS = (2**63 - 1) // 1000
DURATION_MIN_MS = -DURATION_MAX_MS


class FrameError(ValueError):
    """The bytes are not a Kafka request we can answer; the connection is closed."""


@dataclass(frozen=True, slots=True)
class RequestFrame:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any  # a kio request dataclass
    body_bytes: int
    trailing: int = 0  # bytes after the body: tolerated, as Kafka's readers do


def peek_prefix(frame: bytes | memoryview) -> tuple[int, int, int]:
    """api key, api version and correlation id: readable even when the rest is not."""
    if len(frame) < _PREFIX.size:
        raise FrameError(f"frame of {len(frame)} bytes is too short for a request header")
    key, version, correlation = _PREFIX.unpack_from(frame, 0)
    return int(key), int(version), int(correlation)


def known_versions(api_key: int) -> range:
    """The versions kio has schemas for (Kafka 4.x's supported range)."""
    name = api_key_map.get(api_key)
    if name is None:
        return range(0)
    versions = [v for v, types in schema_name_map[name].items() if EntityType.request in types]
    return range(min(versions), max(versions) + 1) if versions else range(0)


@cache
def _request_reader(api_key: int, api_version: int) -> tuple[Callable[..., Any], Callable[..., Any]]:
    schema = load_request_schema(api_key, api_version)
    header_schema = schema.__header_schema__
    return entity_reader(header_schema), entity_reader(schema)


def parse_request(frame: bytes | memoryview) -> RequestFrame:
    """Decode header and body. Raises FrameError on anything malformed."""
    api_key, api_version, correlation_id = peek_prefix(frame)
    try:
        header_reader, body_reader = _request_reader(api_key, api_version)
    except Exception as exc:  # unknown key or version: kio raises its own index errors
        raise FrameError(f"no schema for api key {api_key} version {api_version}") from exc
    view = memoryview(frame)
    try:
        header, header_size = header_reader(view, 0)
        check_counts(api_key, api_version, view, header_size)  # before kio sizes any array
        try:
            body, body_size = body_reader(view, header_size)
        except ValueError:  # kio: "timedelta milliseconds overflow", among others
            # An int64 duration beyond timedelta's range: read it as the longest timedelta holds.
            saturated = saturate_durations(load_request_schema(api_key, api_version), view, header_size)
            if saturated is None:
                raise
            body, body_size = body_reader(memoryview(saturated), header_size)
    except Exception as exc:  # kio raises several decode error types
        raise FrameError(
            f"malformed api key {api_key} v{api_version} request "
            f"(correlation {correlation_id}): {exc}"
        ) from exc
    trailing = len(frame) - header_size - body_size
    if trailing < 0:
        raise FrameError(f"api key {api_key} v{api_version}: the body overruns the frame")
    return RequestFrame(
        api_key=api_key,
        api_version=api_version,
        correlation_id=correlation_id,
        client_id=getattr(header, "client_id", None),
        body=body,
        body_bytes=body_size,
        trailing=trailing,
    )


def saturate_duration_ms(ms: int) -> int:
    """An int64 duration in milliseconds clamped to what a timedelta holds (Kafka accepts any
    int64; a duration of millions of years means "forever" either way, and Korvet uses none of
    these fields to decide anything)."""
    return min(max(ms, DURATION_MIN_MS), DURATION_MAX_MS)


def saturate_durations(schema: type[Any], frame: memoryview, offset: int) -> bytes | None:
    """A copy of ``frame`` whose top-level int64 durations of the ``schema`` body starting at
    ``offset`` are ``saturate_duration_ms``'d, or None when none lies beyond that range (or the
    body does not read up to them)."""
    fields = [f for f in dataclasses.fields(schema) if "tag" not in f.metadata]
    kinds = [f.metadata.get("kafka_type") for f in fields]
    if "timedelta_i64" not in kinds:
        return None
    last = len(kinds) - 1 - kinds[::-1].index("timedelta_i64")
    patched = bytearray(frame)
    position = offset
    changed = False
    try:
        for f, kind in zip(fields[:last + 1], kinds, strict=False):
            if kind == "timedelta_i64":
                (ms,) = _INT64.unpack_from(patched, position)
                if saturate_duration_ms(ms) != ms:
                    _INT64.pack_into(patched, position, saturate_duration_ms(ms))
                    changed = True
                position += _INT64.size
            else:
                _, size = get_field_reader(schema, f, False, False)(frame, position)
                position += size
    except Exception:  # the body is malformed before the durations: the caller's error stands
        return None
    return bytes(patched) if changed else None


_WRITERS: dict[type[Any], tuple[Callable[..., Any], Callable[..., Any], type[Any]]] = {}


def _response_writers(
    response_type: type[Any],
) -> tuple[Callable[..., Any], Callable[..., Any], type[Any]]:
    writers = _WRITERS.get(response_type)
    if writers is None:
        header_schema = response_type.__header_schema__
        writers = (entity_writer(header_schema), entity_writer(response_type), header_schema)
        _WRITERS[response_type] = writers
    return writers


def encode_response(correlation_id: int, response: Any) -> bytes:
    """Size-prefixed response frame for a kio response dataclass (a Produce response from a
    template of its shape when there is one: response_templates.py, the same bytes), or for a
    ``FetchAnswer`` (fetch_response.py)."""
    if type(response) is ProduceAnswer:
        return _PRODUCE_TEMPLATES.encode_answer(correlation_id, response)
    if isinstance(response, FetchAnswer):
        return join(response.frame(correlation_id))
    if getattr(response, "__api_key__", None) == _PRODUCE:
        return _PRODUCE_TEMPLATES.encode(correlation_id, response)
    return _encode_with_kio(correlation_id, response)


def encode_response_pieces(correlation_id: int, response: Any) -> list[Buffer]:
    """``encode_response`` as a list of buffers to be written one after the other: a
    ``FetchAnswer``'s record sets stay the buffers they are held in (no copy)."""
    if isinstance(response, FetchAnswer):
        return response.frame(correlation_id)
    return [encode_response(correlation_id, response)]


def _encode_with_kio(correlation_id: int, response: Any) -> bytes:
    header_writer, body_writer, header_schema = _response_writers(type(response))
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    header_writer(buffer, header_schema(correlation_id=correlation_id))
    body_writer(buffer, response)
    # The size goes in place and getvalue() hands out BytesIO's own bytes: no copy of a
    # response that may carry a megabyte of records.
    size = buffer.tell() - 4
    buffer.seek(0)
    buffer.write(_SIZE.pack(size))
    return buffer.getvalue()


_PRODUCE = 0
_PRODUCE_TEMPLATES = ProduceTemplates(_encode_with_kio)


def response_class(api_key: int, api_version: int) -> type[Any]:
    return load_response_schema(api_key, api_version)


def request_class(api_key: int, api_version: int) -> type[Any]:
    return load_request_schema(api_key, api_version)


# --- the client direction (tests, the conformance suite, the benchmark) ---------------

_REQUEST_WRITERS: dict[type[Any], tuple[Callable[..., Any], Callable[..., Any], type[Any]]] = {}


def encode_request(request: Any, correlation_id: int, client_id: str | None = "korvet", *,
                   api_version: int | None = None) -> bytes:
    """Size-prefixed request frame for a kio request dataclass. ``api_version`` overrides
    the version in the header (to send a body of one version labelled as another)."""
    request_type = type(request)
    writers = _REQUEST_WRITERS.get(request_type)
    if writers is None:
        header_schema = request_type.__header_schema__
        writers = (entity_writer(header_schema), entity_writer(request_type), header_schema)
        _REQUEST_WRITERS[request_type] = writers
    header_writer, body_writer, header_schema = writers
    fields = {"request_api_key": request_type.__api_key__,
              "request_api_version": (request_type.__version__ if api_version is None
                                      else api_version),
              "correlation_id": correlation_id}
    if "client_id" in header_schema.__dataclass_fields__:
        fields["client_id"] = client_id
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\0")
    header_writer(buffer, header_schema(**fields))
    body_writer(buffer, request)
    data = buffer.getbuffer()
    _SIZE.pack_into(data, 0, len(data) - 4)
    out = bytes(data)
    data.release()
    return out


def decode_response(frame: bytes | memoryview, response_type: type[Any]) -> tuple[int, Any]:
    """Correlation id and body of a response frame (without its size prefix)."""
    header_schema = response_type.__header_schema__
    view = memoryview(frame)
    header, header_size = entity_reader(header_schema)(view, 0)
    body, body_size = entity_reader(response_type)(view, header_size)
    if header_size + body_size != len(frame):
        raise FrameError(f"{len(frame) - header_size - body_size} trailing bytes in the response")
    return int(header.correlation_id), body
