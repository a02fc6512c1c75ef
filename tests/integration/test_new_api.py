"""A new Kafka API is one handler module and one rules row (korvet/server/api.py): given only
those, a real broker serves it, announces it in ApiVersions, guards it with its rule at the
authorization check point, and the API table of docs/implementers/broker.md lists it.

The toy API is DescribeQuorum (55), a KRaft controller API the broker will never serve for
real: its handler answers an empty quorum. The broker runs in this process (``app.serve``, the
path ``korvet serve`` takes, on its embedded Redis) so that the toy module can be added to
the handler modules it discovers.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import types
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from korvet.core.api_keys import ApiKey
from korvet.core.errors import ErrorCode
from korvet.core.security import rules
from korvet.core.security.acl import CLUSTER_NAME, Operation
from korvet.core.security.rules import ApiRule, Need, Scope
from korvet.devtools import api_table
from korvet.protocol.denials import Shape, Whole, whole_error
from korvet.protocol.framing import request_class
from korvet.protocol.kbuild import make, response_type
from korvet.server import api, app
from korvet.server.connection import Connection
from korvet.server.services import Services
from korvet.settings import load
from tests.support.wire import WireClient

called: list[str] = []


async def _describe_quorum(services: Services, conn: Connection, request: Any) -> Any:
    called.append(conn.principal)
    return make(response_type(type(request)), throttle_time=0, error_code=ErrorCode.NONE,
                error_message=None, topics=(), nodes=())


def _toy_module() -> types.ModuleType:
    module = types.ModuleType("korvet.server.handlers.toy_describe_quorum")
    module.APIS = (  # type: ignore[attr-defined]
        api.Api(ApiKey.DESCRIBE_QUORUM, range(0, 3), _describe_quorum,
                "a toy: the quorum is empty",
                Shape((Whole(lambda r: CLUSTER_NAME,
                             whole_error(error_message=None, topics=(), nodes=())),))),)
    return module


@pytest.fixture
def toy_api(monkeypatch: pytest.MonkeyPatch) -> None:
    """The toy handler module among the discovered ones, and its rules row."""
    modules = [*api.handler_modules(), _toy_module()]
    monkeypatch.setattr(api, "handler_modules", lambda: modules)
    monkeypatch.setitem(rules.RULES, ApiKey.DESCRIBE_QUORUM,
                        ApiRule(ApiKey.DESCRIBE_QUORUM, (Need(
                            Scope.CLUSTER, Operation.DESCRIBE, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),)))
    called.clear()


@contextlib.asynccontextmanager
async def _broker(data_dir: Path, **settings: object) -> AsyncIterator[str]:
    port_file = data_dir / "port"
    config = load(env={}, overrides={"broker.port": 0, "broker.port-file": str(port_file),
                                     "data.dir": str(data_dir), "http.enabled": False,
                                     "authorizer.enabled": True, **settings})
    ready = asyncio.Event()
    serving = asyncio.create_task(app.serve(config, ready=ready))
    try:
        await asyncio.wait_for(ready.wait(), 60)
        yield f"127.0.0.1:{port_file.read_text().strip()}"
    finally:
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving


def _ask(bootstrap: str, version: int) -> tuple[Any, Any]:
    """ApiVersions' entry for the toy API, and the toy API's answer."""
    with WireClient(bootstrap) as client:
        versions = client.request(make(request_class(ApiKey.API_VERSIONS, 3),
                                       client_software_name="test", client_software_version="1"))
        listed = [k for k in versions.api_keys if k.api_key == ApiKey.DESCRIBE_QUORUM]
        cls = request_class(ApiKey.DESCRIBE_QUORUM, version)
        answer = client.request(make(cls, topics=()))
    return listed, answer


def _served(data_dir: Path, version: int, **settings: object) -> tuple[Any, Any]:
    async def run() -> tuple[Any, Any]:
        async with _broker(data_dir, **settings) as bootstrap:
            return await asyncio.to_thread(_ask, bootstrap, version)
    return asyncio.run(run())


def test_a_declared_api_is_served_announced_and_guarded(toy_api: None, tmp_path: Path) -> None:
    listed, answer = _served(tmp_path / "denied", 2)
    assert [(k.min_version, k.max_version) for k in listed] == [(0, 2)]
    assert answer.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert called == []  # denied at the check point: the handler never ran

    listed, answer = _served(tmp_path / "allowed", 1, **{"authorizer.super-users": "User:ANONYMOUS"})
    assert answer.error_code == ErrorCode.NONE
    assert called == ["User:ANONYMOUS"]


def test_a_declared_api_is_in_the_generated_api_table(toy_api: None) -> None:
    table = api_table.table()
    row = next(line for line in table.splitlines() if line.startswith("| DescribeQuorum |"))
    assert row == ("| DescribeQuorum | 55 | 0–2 | DESCRIBE on the cluster | "
                   "a toy: the quorum is empty |")


def test_two_modules_declaring_one_api_is_an_error_that_names_both() -> None:
    first, second = _toy_module(), _toy_module()
    second.__name__ = "korvet.server.handlers.another"
    with pytest.raises(ValueError, match=re.escape("toy_describe_quorum and korvet.server.handlers.another")):
        api.declared_apis([first, second])
