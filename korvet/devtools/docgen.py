"""Generate docs/users/configuration.md from the settings and topic-config tables.

    .venv/bin/python -m korvet.devtools.docgen        # rewrite the page
    (tests/test_docs.py fails when the committed page differs from what this generates)
"""

from __future__ import annotations

import sys
from pathlib import Path

from korvet.core import group_configs, topics
from korvet.settings import SETTINGS
from korvet.settings.load import INERT, INERT_PREFIXES, TOPIC_FIELDS, TOPIC_INERT_FIELDS

PAGE = Path(__file__).resolve().parents[2] / "docs" / "users" / "configuration.md"

_INTRO = """# Configuration

`korvet serve` reads its settings from, in increasing precedence: the defaults below, a YAML
file given with `--config FILE`, `KORVET_*` environment variables, and command-line flags.
The original product's names are accepted too (below the table). Health probes and
metrics: [operations.md](operations.md).
The YAML keys are the dotted names split at the dots:

```yaml
broker:
  host: 0.0.0.0
  port: 9092
redis:
  url: redis://127.0.0.1:6379/0
topics:
  default-partitions: 3
```

Settings that Kafka has too also answer to Kafka's name (marked "Kafka:" below): as a YAML
key (`socket.request.max.bytes: 1048576`), as `KORVET_` plus that name in capitals
(`KORVET_SOCKET_REQUEST_MAX_BYTES`) and as a flag (`--socket-request-max-bytes`). Korvet's
own name wins when both are given.

`korvet serve --help` prints the same list. Every setting:

| setting | flags | environment | default | meaning |
|---|---|---|---|---|
"""

_TOPICS = """
## Topic configurations

Set them when a topic is created (CreateTopics; `kafka-topics --create --config k=v`) or later
with AlterConfigs and IncrementalAlterConfigs (`kafka-configs --alter`). Names and values are
read as Apache Kafka 4.3.1 reads them (the same names, types, ranges and defaults; tested
against Kafka's own definitions); unknown names and bad values are refused with
INVALID_CONFIG, like Kafka. Those marked *no effect* are accepted so that tools which set them
keep working, and DescribeConfigs reports them, but Korvet does not act on them.

Kafka's own `kafka-topics --create` refuses, before sending anything, a `--config` name that
Kafka does not know: the `korvet.*` settings and `log.append.timestamp.header` cannot be given
to it. Set those at creation through any admin client (`Admin.createTopics` in Java,
`AdminClient.create_topics` in confluent-kafka), with a declared topic or name pattern
(`KORVET_TOPICS_<N>_STORAGE_FORMAT`, above), or for every new topic with the broker's
`topics.*` defaults; the ones that may change later also with `kafka-configs --alter`, which
sends them as they are. The settings marked *fixed at creation* cannot be changed or deleted
afterwards (INVALID_CONFIG).

| config | default | effect |
|---|---|---|
"""

_GROUPS = """
## Group configurations

A group's own settings (KIP-848, KIP-932), set with IncrementalAlterConfigs on a group
(`kafka-configs --entity-type groups --entity-name G --alter --add-config k=v`, or
`Admin.incrementalAlterConfigs` with a GROUP `ConfigResource`) and read with DescribeConfigs,
whether or not the group exists yet. Names, types, defaults and the lower bounds of Kafka's
GroupConfig are Apache Kafka 4.3.1's (Kafka's brokers also keep share groups' values within
their own `group.share.min/max.*` settings, which Korvet does not); unknown names and bad
values are INVALID_CONFIG, AlterConfigs (the legacy API) is INVALID_REQUEST for a group, as
with Kafka. A config the group does not set reads as the broker's setting of the same
meaning (Kafka's `group.<name>`), else the default below. Stored in Redis
(`{ks}:group-configs`), so they outlive a restart and every broker reads them. Share groups
act on `share.auto.offset.reset`, `share.record.lock.duration.ms`,
`share.delivery.count.limit`, `share.partition.max.record.locks`, `share.session.timeout.ms`
and `share.heartbeat.interval.ms`; the others are stored and described only (Korvet serves
no consumer or streams groups of KIP-848/KIP-1071, and no read_committed share groups yet).

| config | default | meaning |
|---|---|---|
"""

_OUTRO = """
`korvet.sequence.bits` is stored with every topic when it is created (from
`topics.sequence-bits` unless the request gives it), so changing the broker default later
never changes the meaning of an existing topic's offsets.
"""


_COMPAT = """
## The original product's configuration

A deployment written for the original product (Korvet, Java) works unchanged:

- **Variables**: Spring's relaxed binding, `korvet.a.b-c` is `KORVET_A_B_C`. The original's
  names are listed above beside ours (`KORVET_REDIS_URI` and `KORVET_REDIS_URL` are the same
  setting; naming both with different values is an error).
- **YAML**: the original's files put everything under `korvet:` (`korvet.broker.port`,
  `korvet.redis.uri`, `korvet.topics[N]...`); Korvet reads them as they are, and also the
  same keys without the `korvet:` level. Keys may be kebab-case, camelCase or snake_case.
  Beside `korvet:`, a Spring application file's `server.port` / `management.server.port`
  (the Actuator's port) set `http.port`; its other frameworks' keys are ignored with a note.
- **Sizes and durations** may be written as the original writes them: `1MB`, `512KB`, `2GB`
  (binary units), `30s`, `5m`, `1h`, `7d`, `PT1H`; plain numbers are bytes or milliseconds.
- **Unknown names**: a `KORVET_*` variable or a YAML key that is no setting is a warning
  that names the closest known one (`KORVET_BROKER_PROT: unknown setting; did you mean
  KORVET_BROKER_PORT?`); with `--strict-config` (`config.strict`) it stops the broker.
  The original's settings that Korvet (Python) has no use for (below) are a note instead.
- **Which Redis**: `korvet serve` prints at start which Redis it uses and where that came
  from: `korvet: using Redis at redis://db:6379/0 (from environment variable KORVET_REDIS_URI)`,
  or that it starts the embedded one because no `redis.url` was given. A password in the URL
  is printed as `****`.
- `redis.cluster=true` makes `redis.url` one node of a Redis Cluster: the broker reads the
  cluster's topology from it and follows failovers (docs/users/deploying.md). It needs
  `redis.url`: the embedded Redis is a single server.

## Declared topics

`KORVET_TOPICS_<N>_<FIELD>` variables and YAML `korvet.topics[N].<field>` entries declare
topics. `name` is a topic name or a pattern where `*` matches any characters (`*` alone:
defaults for every topic). For one topic, every matching entry applies, the most specific
first: the exact name, then patterns with more literal characters, then the lower index; each
field comes from the first entry that sets it. Variables override the YAML entry of the same
index field by field.

- Topics declared by exact name are created when the broker starts (if missing), and in a
  tenant's keyspace (`security.tenants`) when the tenant starts.
- `partitions` is the partition count of a topic created without one (auto-creation,
  `CreateTopics` with `-1`); `auto-create` says whether a client's Metadata request may create
  the topic (default: `topics.auto-create`).
- Topic config fields become the topic's broker-level defaults (DescribeConfigs source
  `STATIC_BROKER_CONFIG`); a config set on the topic itself still wins. `sequence-bits` is
  stored with the topic when it is created.

```sh
KORVET_TOPICS_0_NAME='*'  KORVET_TOPICS_0_AUTO_CREATE=true  KORVET_TOPICS_0_PARTITIONS=3
KORVET_TOPICS_1_NAME=logs KORVET_TOPICS_1_RETENTION_BYTES=1GB KORVET_TOPICS_1_LOG_APPEND_TIMESTAMP_HEADER=true
```

| field | sets | written as |
|---|---|---|
"""


def _compat() -> str:
    rows = []
    for field, (target, kind) in TOPIC_FIELDS.items():
        what = f"topic config `{target}`" if "." in target else target.replace("_", "-")
        rows.append(f"| `{field}` | {what} | {kind} |")
    for field, why in TOPIC_INERT_FIELDS.items():
        rows.append(f"| `{field}` | *no effect*: {why} | |")
    rows.append("| `configs.<name>` | any topic config by its Kafka name (YAML) | str |")
    inert = [f"| `{name}` | {why} |" for name, why in INERT.items()]
    inert += [f"| `{prefix}*` | {why} |" for prefix, why in INERT_PREFIXES.items()]
    return (_COMPAT + "\n".join(rows) + "\n\n### Accepted without effect\n\n"
            "| the original's setting | why |\n|---|---|\n" + "\n".join(inert) + "\n")


def render() -> str:
    rows = []
    for s in SETTINGS:
        if s.hidden:
            continue
        default = repr(s.default) if s.default != "" and not s.secret else "(unset)"
        flags = ", ".join(f"`{f}`" for f in s.flags)
        names = f"`{s.name}`" + "".join(f"<br>also `{n}`" for n in s.also)
        envs = "<br>".join(f"`{e}`" for e in s.envs)
        rows.append(f"| {names} | {flags} | {envs} | `{default}` | {s.help} |")
    topic_rows = []
    for d in topics.CONFIG_DEFS:
        effect = d.doc if d.effective else f"*no effect*: {d.doc}"
        if d.read_only_after_create:
            effect += " (fixed at creation)"
        topic_rows.append(f"| `{d.name}` | `{d.default}` | {effect} |")
    group_rows = [f"| `{d.name}` | `{d.default}` | {d.doc} |" for d in group_configs.GROUP_CONFIG_DEFS]
    return (_INTRO + "\n".join(rows) + "\n" + _compat() + _TOPICS + "\n".join(topic_rows)
            + "\n" + _OUTRO + _GROUPS + "\n".join(group_rows) + "\n")


def main() -> int:
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(render())
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
