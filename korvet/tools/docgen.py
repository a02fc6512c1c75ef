"""Generate docs/users/configuration.md from the settings and topic-config tables.

    .venv/bin/python -m korvet.tools.docgen        # rewrite the page
    (tests/test_docs.py fails when the committed page differs from what this generates)
"""

from __future__ import annotations

import sys
from pathlib import Path

from korvet import config
from korvet.core import topics

PAGE = Path(__file__).resolve().parents[2] / "docs" / "users" / "configuration.md"

_INTRO = """# Configuration

`korvet serve` reads its settings from, in increasing precedence: the defaults below, a YAML
file given with `--config FILE`, `KORVET_*` environment variables, and command-line flags.
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

`korvet serve --help` prints the same list. Every setting:

| setting | flags | environment | default | meaning |
|---|---|---|---|---|
"""

_KAFKA_NAMES = """
Kafka's own names are accepted as top-level YAML keys for the security settings
(see [security.md](security.md)):

| Kafka's name | setting |
|---|---|
"""

_TOPICS = """
## Topic configurations

Set them when a topic is created (CreateTopics; `kafka-topics --create --config k=v`) or later
with AlterConfigs and IncrementalAlterConfigs (`kafka-configs --alter`). Unknown names are
refused with INVALID_CONFIG, like Kafka. Those marked *no effect* are accepted so that tools
which set them keep working, and DescribeConfigs reports them, but Korvet does not act on them.

| config | default | effect |
|---|---|---|
"""

_OUTRO = """
`korvet.sequence.bits` is stored with every topic when it is created (from
`topics.sequence-bits` unless the request gives it), so changing the broker default later
never changes the meaning of an existing topic's offsets.
"""


def render() -> str:
    rows = []
    for s in config.SETTINGS:
        default = repr(s.default) if s.default != "" else "(unset)"
        flags = ", ".join(f"`{f}`" for f in s.flags)
        rows.append(f"| `{s.name}` | {flags} | `{s.env}` | `{default}` | {s.help} |")
    topic_rows = []
    for d in topics.CONFIG_DEFS:
        effect = d.doc if d.effective else f"*no effect*: {d.doc}"
        if d.read_only_after_create:
            effect += " (fixed at creation)"
        topic_rows.append(f"| `{d.name}` | `{d.default}` | {effect} |")
    kafka_rows = [f"| `{kafka}` | `{name}` |" for kafka, name in config.KAFKA_STYLE_NAMES.items()]
    return (_INTRO + "\n".join(rows) + "\n" + _KAFKA_NAMES + "\n".join(kafka_rows) + "\n" + _TOPICS
            + "\n".join(topic_rows) + "\n" + _OUTRO)


def main() -> int:
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(render())
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
