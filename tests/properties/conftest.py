"""Fixtures shared by the property tests that run Korvet's Lua scripts on a real Redis."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from korvet.server.embedded_redis import EmbeddedRedis


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    """A private redis-server (no persistence) for one test module."""
    with tempfile.TemporaryDirectory() as folder:
        server = EmbeddedRedis(Path(folder), appendfsync="off")
        url = server.start()
        try:
            yield url
        finally:
            server.stop()
