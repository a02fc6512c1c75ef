"""ElectLeaders (v0-2) as a version-free value: v0 asks for preferred elections only, v1
names the election type. The other admin APIs read the same fields in every version served.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from korvet.protocol.kbuild import has_field
from korvet.protocol.messages import ElectLeadersRequest

PREFERRED, UNCLEAN = 0, 1  # ElectLeaders' election types


@dataclass(frozen=True, slots=True)
class ElectLeadersCall:
    election_type: int  # as sent: a type Kafka does not have is refused
    topic_partitions: tuple[tuple[str, tuple[int, ...]], ...] | None  # None: every partition


def decode_elect_leaders(request: ElectLeadersRequest) -> ElectLeadersCall:
    shaped: Any = request
    return ElectLeadersCall(
        int(shaped.election_type) if has_field(type(request), "election_type") else PREFERRED,
        None if request.topic_partitions is None else tuple(
            (t.topic, tuple(int(p) for p in t.partitions)) for t in request.topic_partitions))
