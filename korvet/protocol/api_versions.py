"""ApiVersions (key 18): the list of APIs and versions this broker answers.

A client that asks with a version newer than ours gets, as Kafka does, a
version-0 response with UNSUPPORTED_VERSION (35) and the full list, so that it
can pick a version we support and ask again (KIP-511). From v3 the client names
its software; a name or version that does not match Kafka's pattern gets
INVALID_REQUEST (42), as Kafka answers (ApiVersionsRequest.isValid).
"""

from __future__ import annotations

import datetime
import re
from typing import Any

from kio.schema.errors import ErrorCode as KioErrorCode
from kio.static.primitive import i16, i64

from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode
from korvet.protocol.framing import response_class
from korvet.protocol.registry import ApiRegistry

_NO_THROTTLE = datetime.timedelta(0)
# Kafka's ApiVersionsRequest.SOFTWARE_NAME_VERSION_PATTERN (KIP-511).
_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def valid_client_software(request: Any, version: int) -> bool:
    """v3+ requests name the client's software and its version, each matching Kafka's pattern."""
    if version < 3:
        return True
    name = getattr(request, "client_software_name", "") or ""
    release = getattr(request, "client_software_version", "") or ""
    return bool(_SOFTWARE.fullmatch(name) and _SOFTWARE.fullmatch(release))


TRANSACTION_VERSION = "transaction.version"
FEATURES_EPOCH = 1  # the finalized features never change while the broker runs


def build_response(registry: ApiRegistry[Any], version: int, error: ErrorCode = ErrorCode.NONE,
                   transaction_version: int = 2) -> Any:
    """The response; from v3 it names the features: ``transaction.version``, supported 0..2
    and finalized at ``transaction_version`` (2: clients use transactions v2, KIP-890 part
    2; Kafka 4's default)."""
    response_type = response_class(ApiKey.API_VERSIONS, version)
    module = __import__(response_type.__module__, fromlist=["ApiVersion"])
    api_version_type = module.ApiVersion
    keys = tuple(
        api_version_type(api_key=i16(api.key), min_version=i16(api.min_version),
                         max_version=i16(api.max_version))
        for api in registry
    )
    code = KioErrorCode(int(error))
    if version == 0:
        return response_type(error_code=code, api_keys=keys)
    if version < 3:
        return response_type(error_code=code, api_keys=keys, throttle_time=_NO_THROTTLE)
    level = i16(transaction_version)
    return response_type(
        error_code=code, api_keys=keys, throttle_time=_NO_THROTTLE,
        supported_features=(module.SupportedFeatureKey(
            name=TRANSACTION_VERSION, min_version=i16(0), max_version=i16(2)),),
        finalized_features_epoch=i64(FEATURES_EPOCH),
        finalized_features=(module.FinalizedFeatureKey(
            name=TRANSACTION_VERSION, max_version_level=level, min_version_level=level),))


def unsupported_version_response(registry: ApiRegistry[Any]) -> Any:
    return build_response(registry, 0, ErrorCode.UNSUPPORTED_VERSION)
