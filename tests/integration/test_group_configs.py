"""Group configs (KIP-848, KIP-932) through real tools: a share group's
``share.auto.offset.reset`` and lock duration set with IncrementalAlterConfigs on a GROUP
resource, by confluent-kafka's AdminClient and by Kafka's own ``kafka-configs --entity-type
groups``; read back with DescribeConfigs; kept in Redis across a restart
(korvet/core/group_configs.py, docs/users/configuration.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from korvet.bench.clients import alter_group_configs
from korvet.jvm.java_clients import KafkaJavaTools
from tests.conftest import KorvetProcess

pytestmark = pytest.mark.clients

CONFIGS_MAIN = "kafka.admin.ConfigCommand"


def describe(admin: Any, group: str) -> dict[str, tuple[str, int]]:
    """The group's configs: name -> (value, source)."""
    from confluent_kafka.admin import ConfigResource, ResourceType  # type: ignore[attr-defined]

    resource = ConfigResource(ResourceType.GROUP, group)
    entries = admin.describe_configs([resource])[resource].result(30)
    return {name: (entry.value, int(entry.source)) for name, entry in entries.items()}


def alter(broker: KorvetProcess, group: str, *entries: tuple[str, str | None]) -> None:
    alter_group_configs(broker.bootstrap, group, dict(entries))


def test_a_groups_configs_are_set_read_back_refused_deleted_and_kept_across_a_restart(
        tmp_path: Path) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    broker = KorvetProcess(tmp_path / "korvet").start()
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        # Kafka's bounds, from its broker configs (group.share.min/max.record.lock.duration.ms)
        for value, bound in (("2000", "greater than or equal to group.share.min.record"),
                             ("60001", "less than or equal to group.share.max.record")):
            with pytest.raises(KafkaException, match=bound):
                alter(broker, "queue", ("share.record.lock.duration.ms", value))
        broker.stop()
        broker = KorvetProcess(tmp_path / "korvet", extra_args=[
            "--share-min-record-lock-duration-ms", "1000"]).start()  # as Kafka's tests lower it
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        before = describe(admin, "queue")  # a group nobody joined has configs too
        assert before["share.auto.offset.reset"] == ("latest", 4)  # the broker setting (default latest)
        assert before["share.record.lock.duration.ms"][0] == "30000"
        alter(broker, "queue", ("share.auto.offset.reset", "earliest"),
              ("share.record.lock.duration.ms", "2000"))
        after = describe(admin, "queue")
        assert after["share.auto.offset.reset"] == ("earliest", 8)  # GROUP_CONFIG
        assert after["share.record.lock.duration.ms"] == ("2000", 8)
        assert describe(admin, "other")["share.auto.offset.reset"] == ("latest", 4)
        with pytest.raises(KafkaException, match="INVALID_CONFIG"):
            alter(broker, "queue", ("share.delivery.count.limit", "1"))
        with pytest.raises(KafkaException, match="Unknown group config name"):
            alter(broker, "queue", ("retention.ms", "1000"))
        broker.restart()
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        assert describe(admin, "queue")["share.auto.offset.reset"] == ("earliest", 8)
        alter(broker, "queue", ("share.record.lock.duration.ms", None))
        assert describe(admin, "queue")["share.record.lock.duration.ms"][0] == "30000"
    finally:
        broker.stop()


def test_kafka_configs_sets_and_describes_a_groups_configs(korvet: KorvetProcess,
                                                           unique_name: str) -> None:
    tools = KafkaJavaTools(korvet.bootstrap)
    base = ["--bootstrap-server", korvet.bootstrap, "--entity-type", "groups",
            "--entity-name", unique_name]
    altered = tools.run(CONFIGS_MAIN, [*base, "--alter", "--add-config",
                                       "share.auto.offset.reset=earliest,share.delivery.count.limit=3"])
    assert f"Completed updating config for group {unique_name}" in altered.stdout
    described = tools.run(CONFIGS_MAIN, [*base, "--describe"]).stdout
    assert "share.auto.offset.reset=earliest" in described, described
    assert "share.delivery.count.limit=3" in described, described
    refused = tools.run(CONFIGS_MAIN, [*base, "--alter", "--add-config",
                                       "share.auto.offset.reset=newest"], check=False)
    assert refused.returncode != 0
    assert "share.auto.offset.reset" in refused.stdout + refused.stderr


def test_the_brokers_cache_of_group_configs_is_bounded(redis_url: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Group ids are the clients' to choose (a fetch, a DescribeConfigs): the broker keeps
    the configs of at most CACHE_ENTRIES groups, dropping the one read longest ago, which is
    read again from Redis, with what another broker set meanwhile."""
    import asyncio
    from types import SimpleNamespace

    import redis.asyncio as aioredis

    from korvet.server import group_configs

    monkeypatch.setattr(group_configs, "CACHE_ENTRIES", 5)

    async def scenario() -> None:
        client = aioredis.Redis.from_url(redis_url)
        services: Any = SimpleNamespace(store=SimpleNamespace(redis=client, ks="cache-test"))
        configs = group_configs.GroupConfigs(services)
        await configs.put("first", {"share.auto.offset.reset": "earliest"})
        for number in range(200):
            await configs.own(f"asked-{number}")
        assert len(configs._cache) == 5 and "first" not in configs._cache
        other = group_configs.GroupConfigs(services)  # another broker changes it
        await other.put("first", {"share.auto.offset.reset": "by_duration:PT1H"})
        assert await configs.own("first") == {"share.auto.offset.reset": "by_duration:PT1H"}
        await client.aclose()

    asyncio.run(scenario())
