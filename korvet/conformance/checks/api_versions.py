"""ApiVersions (key 18): the first request every client sends."""

from __future__ import annotations

import io
import struct

from kio.serial import entity_writer

from korvet.conformance.harness.context import CheckContext, expect, expect_error
from korvet.conformance.harness.registry import check
from korvet.conformance.kafka.messages import build_request
from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode

API = "ApiVersions (18)"
GUIDE = "Kafka protocol guide, 'Retrieving Supported API versions'"
# The APIs a Kafka client needs to produce and consume with a group.
CORE_APIS = {0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit",
             9: "OffsetFetch", 10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat",
             13: "LeaveGroup", 14: "SyncGroup", 18: "ApiVersions"}


@check("api_versions.v0.lists_core_apis", api=API,
       asserts="ApiVersions v0 answers NONE and lists Produce, Fetch, ListOffsets, Metadata, the "
               "group APIs and ApiVersions itself, each with min_version <= max_version.",
       source=f"{GUIDE}; ApiVersionsResponse.json")
def lists_core_apis(ctx: CheckContext) -> None:
    with ctx.client() as conn:
        response = conn.call(build_request(ApiKey.API_VERSIONS, 0))
    expect_error(response.error_code, ErrorCode.NONE, "ApiVersions v0 error")
    listed = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}
    missing = [f"{name} ({key})" for key, name in CORE_APIS.items() if key not in listed]
    ctx.note("listed_keys", sorted(listed))
    expect(not missing, f"ApiVersions does not list {', '.join(missing)}")
    bad = [k for k, (lo, hi) in listed.items() if lo > hi or lo < 0]
    expect(not bad, f"API keys with min_version > max_version or negative: {bad}")
    expect(len(listed) == len(response.api_keys), "ApiVersions lists an API key twice")


@check("api_versions.every_version_answers", api=API,
       asserts="Every ApiVersions version the broker advertises answers NONE with the same API table "
               "(v3+ requests carry client_software_name/version, KIP-511).",
       source=f"{GUIDE}; KIP-511")
def every_version_answers(ctx: CheckContext) -> None:
    tables = {}
    for version in ctx.apis.versions(ApiKey.API_VERSIONS):
        with ctx.client() as conn:
            response = conn.call(build_request(ApiKey.API_VERSIONS, version,
                                               client_software_name="korvet-conformance",
                                               client_software_version="1.0"))
        expect_error(response.error_code, ErrorCode.NONE, f"ApiVersions v{version} error")
        tables[version] = sorted((int(k.api_key), int(k.min_version), int(k.max_version))
                                 for k in response.api_keys)
    ctx.note("versions", sorted(tables))
    expect(len(tables) >= 2, f"only ApiVersions versions {sorted(tables)} are usable; clients use v3")
    first = next(iter(tables.values()))
    for version, table in tables.items():
        expect(table == first, f"ApiVersions v{version} lists a different API table than v{min(tables)}")


def _api_versions_frame(version: int, correlation: int) -> bytes:
    """An ApiVersions request labelled ``version``, with a v3 (flexible) body and header v2."""
    body = build_request(ApiKey.API_VERSIONS, 3, client_software_name="korvet-conformance",
                         client_software_version="1.0")
    buffer = io.BytesIO()
    client_id = b"korvet-conformance"
    buffer.write(struct.pack(">hhih", ApiKey.API_VERSIONS, version, correlation, len(client_id)) + client_id)
    buffer.write(b"\x00")  # header v2: no tagged fields
    entity_writer(type(body))(buffer, body)
    payload = buffer.getvalue()
    return struct.pack(">i", len(payload)) + payload


@check("api_versions.unsupported_version_answered_with_v0", api=API,
       asserts="An ApiVersions request with a version newer than the broker knows is answered with a "
               "v0 response carrying UNSUPPORTED_VERSION (35) and the API table, so the client can "
               "retry with a version the broker supports.",
       source="KIP-511; Kafka SocketServer/ApiVersionsRequest.getErrorResponse for unsupported versions")
def unsupported_version(ctx: CheckContext) -> None:
    conn = ctx.client()
    correlation = conn.allocate_correlation_id()
    conn.send_frame(_api_versions_frame(127, correlation), api_key=ApiKey.API_VERSIONS, version=0,
                    correlation_id=correlation)
    response = conn.receive()
    expect_error(response.error_code, ErrorCode.UNSUPPORTED_VERSION, "ApiVersions v127 error")
    keys = {int(k.api_key) for k in response.api_keys}
    ctx.note("keys_listed", len(keys))
    expect(ApiKey.API_VERSIONS in keys, "the UNSUPPORTED_VERSION answer does not list ApiVersions itself")
    # The connection stays usable: the client retries with a version from the list.
    retry = conn.call(build_request(ApiKey.API_VERSIONS, 0))
    expect_error(retry.error_code, ErrorCode.NONE, "ApiVersions v0 retry on the same connection")


@check("api_versions.v3.client_software_name_accepted", api=API,
       asserts="ApiVersions v3 with a client software name and version made of letters, digits, "
               "'.', '-' answers NONE (librdkafka and the Java client send these).",
       source="KIP-511; ApiVersionsRequest.isValid")
def client_software(ctx: CheckContext) -> None:
    version = ctx.apis.pick(ApiKey.API_VERSIONS, 3)
    with ctx.client() as conn:
        response = conn.call(build_request(ApiKey.API_VERSIONS, version,
                                           client_software_name="apache-kafka-java",
                                           client_software_version="4.3.1"))
    expect_error(response.error_code, ErrorCode.NONE, f"ApiVersions v{version} error")
