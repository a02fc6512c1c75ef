"""Connection-level behaviour: ordering, correlation ids, bad frames."""

from __future__ import annotations

import struct

from korvet.conformance.harness.context import CheckContext, expect, expect_error
from korvet.conformance.harness.registry import check
from korvet.conformance.kafka.messages import build_request
from korvet.conformance.kafka.ops import Ops
from korvet.conformance.kafka.wire import ConnectionClosed, WireClient
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode

API = "Connection"
GUIDE = "Kafka protocol guide, 'Network' and 'Protocol Primitives'"


def _still_serving(ctx: CheckContext) -> None:
    with ctx.client() as fresh:
        response = fresh.call(build_request(ApiKey.API_VERSIONS, 0))
    expect_error(response.error_code, ErrorCode.NONE, "ApiVersions on a new connection afterwards")


@check("connection.pipelined_requests_answered_in_order", api=API,
       asserts="Several requests sent back to back on one connection are answered in the order they "
               "were sent, each response carrying its request's correlation id.",
       source=f"{GUIDE}: 'the server guarantees that on a single TCP connection, requests will be "
              "processed in the order they are sent and responses will return in that order'")
def pipelined(ctx: CheckContext) -> None:
    ops = Ops(ctx)
    conn = ctx.client()
    meta_version = ops.v(ApiKey.METADATA)
    for i in range(6):
        if i % 2:
            conn.send(build_request(ApiKey.API_VERSIONS, 0))
        else:
            conn.send(ops_metadata_request(meta_version))
    for i in range(6):
        response = conn.receive()  # receive() checks the correlation id of each answer
        kind = "ApiVersions" if i % 2 else "Metadata"
        expect(hasattr(response, "api_keys") == bool(i % 2), f"answer {i} is not the {kind} response")


def ops_metadata_request(version: int) -> object:
    return build_request(ApiKey.METADATA, version, topics=[], allow_auto_topic_creation=False,
                         include_cluster_authorized_operations=False,
                         include_topic_authorized_operations=False)


@check("connection.null_client_id_accepted", api=API,
       asserts="A request header with a null client id (length -1) is answered normally.",
       source=f"{GUIDE}: RequestHeader client_id is a NULLABLE_STRING")
def null_client_id(ctx: CheckContext) -> None:
    conn = ctx.client(client_id=None)
    response = conn.call(build_request(ApiKey.API_VERSIONS, 0))
    expect_error(response.error_code, ErrorCode.NONE, "ApiVersions with a null client id")


@check("connection.unknown_api_key_closes_connection", api=API,
       asserts="A request with an API key the broker does not know gets no response: the broker "
               "closes that connection and keeps serving others.",
       source="Kafka SocketServer.Processor: a request header that cannot be parsed "
              "(InvalidRequestException) closes the connection")
def unknown_api_key(ctx: CheckContext) -> None:
    conn = ctx.client()
    header = struct.pack(">hhih", 29999, 0, 7, 4) + b"test"
    conn.send_bytes(struct.pack(">i", len(header)) + header)
    closed = conn.wait_closed(10.0)
    expect(closed, "the broker kept the connection open (or answered) after an unknown API key")
    _still_serving(ctx)


@check("connection.unsupported_version_closes_connection", api=API,
       asserts="A Metadata request with a version the broker does not support gets no response: the "
               "broker closes the connection (only ApiVersions answers unsupported versions).",
       source="Kafka RequestContext.parseRequest / SocketServer: unsupported version -> "
              "InvalidRequestException -> connection closed; KIP-511 for the ApiVersions exception")
def unsupported_version(ctx: CheckContext) -> None:
    conn = ctx.client()
    header = struct.pack(">hhih", ApiKey.METADATA, 999, 7, 4) + b"test" + b"\x00"
    body = b"\x01\x00\x00"  # a few bytes; the broker must not get as far as reading them
    conn.send_bytes(struct.pack(">i", len(header) + len(body)) + header + body)
    expect(conn.wait_closed(10.0), "the broker kept the connection open after Metadata v999")
    _still_serving(ctx)


@check("connection.oversized_frame_closes_connection", slow=True, api=API,
       asserts="A frame whose size prefix exceeds socket.request.max.bytes (100 MB by default) is "
               "refused by closing the connection before the body is read.",
       source="Kafka NetworkReceive/InvalidReceiveException; broker config socket.request.max.bytes")
def oversized_frame(ctx: CheckContext) -> None:
    conn = ctx.client()
    conn.send_bytes(struct.pack(">i", 1_500_000_000) + b"\x00\x12\x00\x00")
    expect(conn.wait_closed(10.0), "the broker waited for a 1.5 GB request instead of closing")
    _still_serving(ctx)


@check("connection.truncated_request_does_not_hurt_others", api=API,
       asserts="A client that disconnects in the middle of a request frame does not disturb the "
               "broker: other connections are served.",
       source=f"{GUIDE} (size-delimited frames)")
def truncated(ctx: CheckContext) -> None:
    conn = WireClient(ctx.host, ctx.port)
    try:
        conn.send_bytes(struct.pack(">i", 200) + b"\x00\x03\x00\x0c\x00\x00")
    finally:
        conn.close()
    _still_serving(ctx)


@check("connection.correlation_id_echoed", api=API,
       asserts="The response header echoes the request's correlation id, including negative and "
               "large ones.",
       source=f"{GUIDE}: 'correlation_id ... is passed back in the response'")
def correlation_echo(ctx: CheckContext) -> None:
    from korvet.conformance.kafka.wire import encode_request

    conn = ctx.client()
    for correlation in (-5, 2**31 - 1, 0):
        frame = encode_request(build_request(ApiKey.API_VERSIONS, 0), correlation)
        conn.send_frame(frame, api_key=ApiKey.API_VERSIONS, version=0, correlation_id=correlation)
        try:
            conn.receive()
        except ConnectionClosed as exc:
            raise AssertionError(f"correlation id {correlation}: {exc}") from exc


@check("connection.trailing_bytes_after_body_ignored", api=API,
       asserts="A request frame with a few bytes after the last field of its body is answered normally "
               "(Kafka reads the fields it knows and ignores the rest); librdkafka 2.16's AdminClient "
               "sends such Metadata v13 requests.",
       source="Kafka RequestContext.parseRequest (reads the schema's fields, no end-of-frame check); "
              "observed from librdkafka 2.16 list_topics()")
def trailing_bytes(ctx: CheckContext) -> None:
    from korvet.conformance.kafka.wire import encode_request

    ops = Ops(ctx)
    version = ops.v(ApiKey.METADATA)
    conn = ctx.client()
    correlation = conn.allocate_correlation_id()
    frame = encode_request(ops_metadata_request(version), correlation)
    padded = frame + b"\x01\x00\x00"
    padded = struct.pack(">i", len(padded) - 4) + padded[4:]
    conn.send_frame(padded, api_key=ApiKey.METADATA, version=version, correlation_id=correlation)
    response = conn.receive()
    expect(hasattr(response, "brokers"), "the answer is not a Metadata response")
