"""Group configs set as a user sets them: IncrementalAlterConfigs on a GROUP resource through
confluent-kafka's AdminClient (what `kafka-configs --entity-type groups` sends)."""

from __future__ import annotations

from collections.abc import Mapping


def alter_group_configs(bootstrap: str, group: str, configs: Mapping[str, str | None]) -> None:
    """SET each config with a value, DELETE each given None; raises the broker's refusal."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET
                    if value is not None else AlterConfigOpType.DELETE)
        for name, value in configs.items()])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.incremental_alter_configs([resource])[resource].result(30)
