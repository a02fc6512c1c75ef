"""ApiVersions (key 18): the APIs and versions the tenant serves, from its API table.

The answer itself is built in korvet/protocol/api_versions.py (KIP-511: a client asking with a
version newer than ours gets version 0 with UNSUPPORTED_VERSION and the full list, from the
listener, before any handler); here a v3+ request whose client software name or version does
not match Kafka's pattern is answered INVALID_REQUEST, as Kafka answers it.
"""

from __future__ import annotations

from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode
from korvet.protocol import api_versions
from korvet.protocol.messages import ApiVersionsRequest, ApiVersionsResponse
from korvet.server.api import Api
from korvet.server.connection import Connection
from korvet.server.services import Services


async def handle(services: Services, conn: Connection,
                 request: ApiVersionsRequest) -> ApiVersionsResponse:
    if not api_versions.valid_client_software(request, conn.api_version):
        return api_versions.build_response(services.apis, conn.api_version,
                                           ErrorCode.INVALID_REQUEST,
                                           services.settings.transactions.version)
    return api_versions.build_response(services.apis, conn.api_version,
                                       transaction_version=services.settings.transactions.version)


APIS = (
    Api(ApiKey.API_VERSIONS, range(0, 5), handle,
        "v4 differs from v3 only in how features are listed; v3+ names the feature "
        "transaction.version (finalized at `transactions.version`, 2 by default)"),
)
