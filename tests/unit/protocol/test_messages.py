"""korvet/protocol/messages.py (the handlers' typed request and response unions) is what its
generator writes, and covers every API version the broker announces."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import redis.asyncio as aioredis
from kio.schema.index import api_key_map

from korvet.server.broker import Broker
from korvet.settings import load

ROOT = Path(__file__).resolve().parents[3]
MESSAGES = ROOT / "korvet" / "protocol" / "messages.py"


def test_the_generated_module_is_current() -> None:
    result = subprocess.run([sys.executable, "scripts/gen_messages.py", "--check"], cwd=ROOT,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr


def test_the_unions_cover_what_api_versions_announces() -> None:
    typed = {(m.group(1), int(m.group(2))) for m in re.finditer(
        r"import kio\.schema\.(\w+)\.v(\d+)\.request as", MESSAGES.read_text())}
    client = aioredis.Redis(host="127.0.0.1", port=1)  # never connected: the registry only
    broker = Broker(load(env={}), client, redis_url="redis://127.0.0.1:1")
    assert len(broker.registry) >= 25
    for api in broker.registry:
        name = api_key_map[api.key]
        missing = [v for v in range(api.min_version, api.max_version + 1) if (name, v) not in typed]
        assert not missing, f"{api.name} announces versions {missing} its handler is not typed for"
